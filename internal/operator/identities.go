package operator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// setIdentity records the identity a host's run issued, and whether it has expired at now.
func (h *Host) setIdentity(issued, expires time.Time, signer string, now time.Time) {
	h.IdentityIssued, h.IdentityExpires, h.IdentitySigner = issued, expires, signer
	h.Expired = !expires.After(now)
}

// ExpiringFilter selects the identities hosts hold now that expire within a duration.
type ExpiringFilter struct {
	Within time.Duration
	Site   string // "" : the operator's site (its Starter's, the configuration's)
	Text   string // substring of the identity
	Limit  int    // at most this many, the soonest to expire (0: all)
}

// ExpiringQuery is the visibility query of the identities that expire before until on the
// operator's task queue and site: what the Web UI's filter box and `temporal workflow list
// --query` take too. It matches superseded runs as well; Expiring keeps each host's latest.
func (o *Operator) ExpiringQuery(site string, until time.Time) (string, error) {
	if site == "" {
		site = o.Starter.Site
	}
	q, err := hostruns.IssuedQuery(o.TaskQueue, site, hostruns.ExpiresBefore(until))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadFilter, err)
	}
	return q, nil
}

// Expiring lists the hosts whose current identity (the one their latest run issued) expires
// within f.Within from now, those already expired included and marked, soonest first. Its cost
// is the pages of the identities that match and one request per hostruns.IDsPerQuery of their
// hosts (hostruns.Current), whatever the size of the fleet.
func (o *Operator) Expiring(ctx context.Context, f ExpiringFilter) ([]Host, error) {
	if f.Within <= 0 || f.Limit < 0 {
		return nil, fmt.Errorf("%w: expiring within %v, limit %d", ErrBadFilter, f.Within, f.Limit)
	}
	now := o.now()
	query, err := o.ExpiringQuery(f.Site, now.Add(f.Within))
	if err != nil {
		return nil, err
	}
	runs, err := hostruns.Current(ctx, o.C, query)
	if err != nil {
		return nil, fmt.Errorf("listing expiring identities: %w", unreachable(err))
	}
	hosts := make([]Host, 0, len(runs))
	for _, r := range runs {
		h := o.hostOf(r)
		if f.Text != "" && !strings.Contains(h.Identity, f.Text) {
			continue
		}
		// h.Runs stays 0 (unknown): Current confirms each run is its host's latest without
		// counting the host's runs
		hosts = append(hosts, h)
		if f.Limit > 0 && len(hosts) == f.Limit {
			break
		}
	}
	return hosts, nil
}
