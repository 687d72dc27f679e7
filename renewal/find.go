package renewal

import (
	"context"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// FindExpiring lists the identities our hosts hold now that expire before in.Before, expired
// ones included, the soonest first, at most in.Limit of them, banned and retired hosts left out:
// by the audit sink's records when the worker has a sink it reads back, else by each host's
// latest run (hostruns.Current: a host being provisioned, or provisioned again since, is left out).
func (a *Activities) FindExpiring(ctx context.Context, in FindInput) (*FindResult, error) {
	if err := a.admit(ctx, FindExpiringName); err != nil {
		return nil, err
	}
	current, err := a.expiring(ctx, in.Before)
	if err != nil {
		return nil, err
	}
	out := &FindResult{Found: len(current)}
	for _, h := range current {
		if len(out.Hosts) == in.Limit {
			break
		}
		if a.skip != nil {
			// the audit says the host is banned or retired: its identity is left to lapse
			why, err := a.skip(ctx, h.Identity)
			if err != nil {
				return nil, err // fail closed: renew no one on a list that cannot be read
			}
			if why != "" {
				out.Found--
				a.log.Info("not renewed", zap.String(logging.FieldIdentity, h.Identity), zap.String(logging.FieldReason, why))
				continue
			}
		}
		out.Hosts = append(out.Hosts, h)
	}
	return out, nil
}

// expiring is the identities expiring before before, the soonest first: from the audit sink's
// records when the worker has them, with the hosts the sink has no issuance of (issued before it
// was turned on) from their latest runs; else from each host's latest run in visibility.
func (a *Activities) expiring(ctx context.Context, before time.Time) ([]Expiring, error) {
	runs, err := a.runsExpiring(ctx, before)
	if err != nil || a.records == nil {
		return runs, err
	}
	recs, err := a.records.Expiring(ctx, before, a.starter.Site)
	if err != nil {
		return nil, err
	}
	out := make([]Expiring, 0, len(recs))
	for _, r := range recs {
		out = append(out, Expiring{Identity: r.Identity, RunID: r.LastRunID, Expires: r.Expires})
	}
	for _, r := range runs {
		st, err := a.records.State(ctx, r.Identity)
		if err != nil {
			return nil, err
		}
		if st.Issued.IsZero() && !st.Retired {
			out = append(out, r) // not in the sink: its run is its record until it is renewed
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Expires.Before(out[j].Expires) })
	return out, nil
}

// runsExpiring is the identities of each host's latest run that expire before before.
func (a *Activities) runsExpiring(ctx context.Context, before time.Time) ([]Expiring, error) {
	query, err := hostruns.IssuedQuery(a.starter.TaskQueue, a.starter.Site, hostruns.ExpiresBefore(before))
	if err != nil {
		return nil, err
	}
	stop := activities.Heartbeat(ctx) // a listing of tens of thousands of runs outlasts a heartbeat timeout
	current, err := hostruns.Current(ctx, a.temporal, query)
	stop()
	if err != nil {
		return nil, err
	}
	out := make([]Expiring, len(current))
	for i, r := range current {
		out[i] = Expiring{Identity: r.HostIdentity(), RunID: r.RunID, Expires: r.Expires}
	}
	return out, nil
}
