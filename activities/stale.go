package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
)

// RunHistory answers, from Temporal, whether a host's workflow had a run that completed after a
// given time. A discovery sweep's reply sent just before a host restarted can reach Temporal after
// that host's run has closed and start a new run against a server that has left the provisioning
// collective; that run's first RPC gets no reply. Telling it apart from a vanished host needs
// the earlier run's close time, which only Temporal has.
type RunHistory interface {
	CompletedAfter(ctx context.Context, workflowID, excludeRunID string, after time.Time) (closed time.Time, found bool, err error)
}

// WithRunHistory lets the first RPC of a run recognise a stale sighting.
func WithRunHistory(r RunHistory) Option {
	return func(a *Activities) { a.runs = r }
}

// stale turns a first read's "no reply" (or the host's own "not in provisioning mode") into a
// non-retryable NotInProvisioningMode error when the host's previous run completed after the
// sighting that started this run: the host was provisioned and left the provisioning
// collective. Temporal's record decides, never the host's word alone: a host that says it is not
// in provisioning mode while it answers there gets the run's retries and then fails it.
func (a *Activities) stale(ctx context.Context, in HostInput, err error) error {
	var app *temporal.ApplicationError
	if a.runs == nil || in.SeenAt.IsZero() || !errors.As(err, &app) ||
		(app.Type() != ErrTypeNoReply && app.Type() != ErrTypeHostNotProvisioning) {
		return err
	}
	info := activity.GetInfo(ctx)
	closed, found, qerr := a.runs.CompletedAfter(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, in.SeenAt)
	if qerr != nil {
		a.logger(ctx, in.Identity, "stale-check").Warn("could not read earlier runs", zap.Error(qerr))
		return err
	}
	if !found {
		return err
	}
	return NewError(ErrTypeNotProvisioning, fmt.Sprintf(
		"%s; an earlier run completed at %s, after the sighting at %s: the host is no longer in provisioning mode",
		app.Message(), closed.UTC().Format(time.RFC3339), in.SeenAt.UTC().Format(time.RFC3339)), err)
}
