package renewal

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ErrTypeRunFailed fails a renewal run that could not record its policy or find the hosts.
const ErrTypeRunFailed = "RenewalRunFailed"

// Registry is where the workflow is registered: a worker, a replayer, a test environment.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// Workflow is RenewIdentities bound to the policy of the worker that registers it.
type Workflow struct {
	Policy Policy
}

// Register registers RenewIdentities bound to w's policy.
func (w Workflow) Register(r Registry) {
	r.RegisterWorkflowWithOptions(w.RenewIdentities, workflow.RegisterOptions{Name: WorkflowName})
}

// RenewIdentities is one Schedule run: it records the worker's policy, renews nothing when that
// is off or outside its window, else finds the current identities expiring within renew_before
// and asks each host, at the policy's rate, to re-enter provisioning mode.
func (w Workflow) RenewIdentities(ctx workflow.Context) (*Result, error) {
	r, err := begin(ctx, w.Policy)
	if err != nil {
		return nil, err
	}
	if r.result.Skipped = r.skip(); r.result.Skipped != "" {
		return &r.result, nil
	}
	hosts, err := r.find(ctx)
	if err != nil {
		return nil, err
	}
	r.renewAll(ctx, hosts)
	return &r.result, nil
}

// run is one renewal run: the policy it recorded, when it began, and what it did.
type run struct {
	policy Policy
	now    time.Time
	result Result
}

// begin records the worker's policy: read from the worker once, replayed from the history ever
// after, so that a configuration change never alters a run under way.
func begin(ctx workflow.Context, current Policy) (*run, error) {
	r := &run{now: workflow.Now(ctx)}
	err := workflow.SideEffect(ctx, func(workflow.Context) any { return current }).Get(&r.policy)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("recording the worker's renewal policy: %v", err), ErrTypeRunFailed, err)
	}
	return r, nil
}

// skip says why the run renews nothing ("" when it renews).
func (r *run) skip() string {
	switch {
	case !r.policy.Enabled:
		return "renewal is disabled in the worker's configuration"
	case r.policy.Rate <= 0:
		return "the worker's renewal rate is not positive"
	case !r.policy.InWindow(r.now):
		return fmt.Sprintf("outside the renewal window (%02d:%02d-%02d:%02d UTC)", r.policy.WindowStart/60, r.policy.WindowStart%60,
			r.policy.WindowEnd/60, r.policy.WindowEnd%60)
	}
	return ""
}

// find lists the current identities expiring within renew_before, the soonest first.
func (r *run) find(ctx workflow.Context) ([]Expiring, error) {
	limit := r.policy.Limit
	if limit <= 0 {
		limit = MaxHostsPerRun
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 5},
	})
	var found FindResult
	if err := workflow.ExecuteActivity(actx, FindExpiringName, FindInput{Before: r.now.Add(r.policy.RenewBefore), Limit: limit}).Get(ctx, &found); err != nil {
		return nil, fmt.Errorf("finding the identities to renew: %w", err)
	}
	r.result.Found = found.Found
	return found.Hosts, nil
}

// RenewRetry is the Renew activity's retry policy: a host that does not answer is asked three
// times; one that answers with an error, or a task that is not ours, is not asked again.
var RenewRetry = temporal.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
	MaximumAttempts: 3, NonRetryableErrorTypes: []string{ErrTypeRefused, ErrTypeForeign, ErrTypeDeferred}}

// renewAll starts a Renew activity per host, batch hosts every tick of the policy's pace (durable
// timers), then waits for them all and records each host's outcome.
func (r *run) renewAll(ctx workflow.Context, hosts []Expiring) {
	retry := RenewRetry
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: &retry})
	batch, tick := r.policy.Pace()
	futures := make([]workflow.Future, len(hosts))
	for i, h := range hosts {
		if i > 0 && i%batch == 0 {
			if err := workflow.Sleep(ctx, tick); err != nil {
				futures = futures[:i] // canceled: record what was asked
				break
			}
		}
		futures[i] = workflow.ExecuteActivity(actx, RenewName, RenewInput{Host: h, Now: workflow.Now(ctx)})
	}
	for i, f := range futures {
		var done HostRenewal
		err := f.Get(ctx, &done)
		r.record(hosts[i], done, err, workflow.Now(ctx))
	}
}

// record adds one host's outcome to the result: renewed, or failed with the reason.
func (r *run) record(h Expiring, done HostRenewal, err error, at time.Time) {
	if !h.Expires.After(r.now) {
		r.result.Expired = append(r.result.Expired, h.Identity)
	}
	if err == nil {
		r.result.Renewed++
		return
	}
	fail := HostRenewal{Identity: h.Identity, RunID: h.RunID, Expires: h.Expires, Expired: !h.Expires.After(r.now),
		Outcome: OutcomeOf(err), Reason: reason(err), At: at}
	r.result.Failed = append(r.result.Failed, fail)
}

// OutcomeOf is the outcome of a host whose Renew activity failed with err.
func OutcomeOf(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		switch app.Type() {
		case ErrTypeRefused, ErrTypeForeign:
			return OutcomeRefused
		case ErrTypeDeferred:
			return OutcomeDeferred
		}
	}
	return OutcomeUnreachable
}

// reason is the failure's own message, without the activity error's wrapping.
func reason(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return "timed out: " + timeout.Error()
	}
	return err.Error()
}
