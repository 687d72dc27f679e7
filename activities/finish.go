package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"
)

// Who retries a step: Temporal, by the activity's retry policy (every step but the helper), or
// the workflow itself, one activity attempt per try (the helper), which then says whether this
// try is its last.
const (
	noWorkflowRetry = iota
	workflowRetries
	lastWorkflowTry
	workflowRetryUnknown
)

// workflowRetried is an input whose step the workflow retries itself (HelperRequest).
type workflowRetried interface{ workflowRetry() int }

func (r HelperRequest) workflowRetry() int {
	switch {
	case r.Attempts > 0 && r.Attempt < r.Attempts:
		return workflowRetries
	case r.Attempts > 0:
		return lastWorkflowTry
	}
	return workflowRetryUnknown
}

// finish turns an activity error into its Temporal form and logs it. provision_errors is not
// counted here but once per run that ends failed (service's workflow interceptor): a step's last
// failure does not always fail the host (a stale sighting, an optional upgrade, a shutdown).
func (a *Activities) finish(ctx context.Context, in identified, step string, err error) error {
	log := a.logger(ctx, in.HostIdentity(), step)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		// not classified where it was made: a failure of ours or of the transport, never "no reply"
		err = NewError(ErrTypeRPC, err.Error(), err)
		errors.As(err, &appErr)
	}
	info := activity.GetInfo(ctx)
	rp := info.RetryPolicy
	spent := rp != nil && rp.MaximumAttempts > 0 && info.Attempt >= rp.MaximumAttempts
	workflowRetry, final := finality(in, appErr.NonRetryable(), spent)
	notProvisioning := appErr.Type() == ErrTypeNotProvisioning
	shutdownGone := step == StepShutdown && appErr.Type() == ErrTypeNoReply && spent
	opts := temporal.ApplicationErrorOptions{
		// carry the attempt to the workflow's timeline
		NonRetryable: appErr.NonRetryable(), Cause: errors.Unwrap(appErr), Details: []any{info.Attempt},
	}
	if !final || notProvisioning || shutdownGone {
		// a try that is retried, or an expected end: the SDK logs it at debug, not error
		opts.Category = temporal.ApplicationErrorCategoryBenign
	}
	err = temporal.NewApplicationErrorWithOptions(appErr.Message(), appErr.Type(), opts)
	switch {
	case notProvisioning:
		// the workflow decides: a stale sighting of a provisioned host, or a failure it reports
		log.Info("the server is not in provisioning mode", zap.Error(err))
	case shutdownGone:
		log.Warn("no reply to shutdown: a server exits at once when its splay is 0 s", zap.Error(err))
	default:
		logFailure(log, err, final, workflowRetry)
	}
	return err
}

// finality says who retries the step and whether this failure is its last.
func finality(in identified, nonRetryable, spent bool) (workflowRetry int, final bool) {
	workflowRetry = noWorkflowRetry
	if r, ok := in.(workflowRetried); ok {
		workflowRetry = r.workflowRetry()
	}
	switch workflowRetry {
	case noWorkflowRetry:
		return workflowRetry, nonRetryable || spent
	case lastWorkflowTry:
		return workflowRetry, true
	}
	return workflowRetry, nonRetryable
}

func logFailure(log *zap.Logger, err error, final bool, workflowRetry int) {
	switch {
	case final:
		log.Error("step failed, no retries left", zap.Error(err))
	case workflowRetry == workflowRetryUnknown:
		log.Warn("step failed", zap.Error(err))
	default:
		log.Warn("step failed, will retry", zap.Error(err))
	}
}
