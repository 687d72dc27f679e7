package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/internal/logging"
)

// Announcer tells a host's workflow run that its helper step has been running for a while
// (the service signals the run).
type Announcer interface {
	HelperRunning(ctx context.Context, workflowID, runID string) error
}

// WithAnnouncer lets helper steps that ask for it (HelperRequest.Announce) tell their run.
func WithAnnouncer(an Announcer) Option {
	return func(a *Activities) { a.announcer = an }
}

// announceTimeout bounds the one signal a long helper step sends.
const announceTimeout = 10 * time.Second

// announceAfter tells the step's run, once, if the step is still running after d; the returned
// func cancels it. A failure to tell is logged: it costs the host only its findability.
func (a *Activities) announceAfter(ctx context.Context, identity string, d time.Duration) (cancel func()) {
	info := activity.GetInfo(ctx)
	t := time.AfterFunc(d, func() {
		sctx, done := context.WithTimeout(context.Background(), announceTimeout)
		defer done()
		if err := a.announcer.HelperRunning(sctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID); err != nil {
			a.log.Warn("could not tell the workflow that its helper runs long", zap.String(logging.FieldIdentity, identity), zap.Error(err))
		}
	})
	return func() { t.Stop() }
}
