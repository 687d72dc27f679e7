package renewal

import (
	"context"
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
// records when the worker has them, else from each host's latest run in Temporal's visibility.
func (a *Activities) expiring(ctx context.Context, before time.Time) ([]Expiring, error) {
	if a.records != nil {
		recs, err := a.records.Expiring(ctx, before, a.starter.Site)
		if err != nil {
			return nil, err
		}
		out := make([]Expiring, len(recs))
		for i, r := range recs {
			out[i] = Expiring{Identity: r.Identity, RunID: r.LastRunID, Expires: r.Expires}
		}
		return out, nil
	}
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
