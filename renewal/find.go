package renewal

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/choria-temporal/provisioner/internal/hostruns"
	"github.com/choria-temporal/provisioner/workflows"
)

// heartbeatEvery keeps a long listing (tens of thousands of runs) alive for the activity's
// heartbeat timeout.
const heartbeatEvery = 5 * time.Second

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
	stop := heartbeat(ctx)
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
		id := r.Identity
		if id == "" { // a run started before its identity attribute was set: its workflow ID names it
			id, _ = workflows.IdentityFromWorkflowID(r.WorkflowID)
		}
		out.Hosts = append(out.Hosts, Expiring{Identity: id, RunID: r.RunID, Expires: r.Expires})
	}
	return out, nil
}

// heartbeat records the activity's heartbeat every heartbeatEvery until stop is called.
func heartbeat(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(heartbeatEvery)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done) }
}
