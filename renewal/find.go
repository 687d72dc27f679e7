package renewal

import (
	"context"

	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// FindExpiring lists the identities our hosts hold now (hostruns.Current: each host's latest run,
// so a host being provisioned, or provisioned again since, is left out) that expire before
// in.Before, expired ones included, the soonest first; at most in.Limit of them.
func (a *Activities) FindExpiring(ctx context.Context, in FindInput) (*FindResult, error) {
	if err := a.admit(ctx, FindExpiringName); err != nil {
		return nil, err
	}
	query, err := hostruns.IssuedQuery(a.starter.TaskQueue, a.starter.Site, hostruns.ExpiresBefore(in.Before))
	if err != nil {
		return nil, err
	}
	stop := activities.Heartbeat(ctx) // a listing of tens of thousands of runs outlasts a heartbeat timeout
	current, err := hostruns.Current(ctx, a.temporal, query)
	stop()
	if err != nil {
		return nil, err
	}
	out := &FindResult{Found: len(current)}
	for _, r := range current {
		if len(out.Hosts) == in.Limit {
			break
		}
		if a.skip != nil {
			// the audit says the host is banned or retired: its identity is left to lapse
			why, err := a.skip(ctx, r.HostIdentity())
			if err != nil {
				return nil, err // fail closed: renew no one on a list that cannot be read
			}
			if why != "" {
				out.Found--
				a.log.Info("not renewed", zap.String(logging.FieldIdentity, r.HostIdentity()), zap.String(logging.FieldReason, why))
				continue
			}
		}
		out.Hosts = append(out.Hosts, Expiring{Identity: r.HostIdentity(), RunID: r.RunID, Expires: r.Expires})
	}
	return out, nil
}
