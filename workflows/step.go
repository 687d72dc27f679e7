package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// step runs one step with its row of the step table and records each run in the timeline.
// Steps with workflow-level attempts (the helper) retry here rather than in the activity.
func (p *provisioner) step(ctx workflow.Context, step string, arg any, result any) error {
	// a fleet-wide pause holds the host here, before its next RPC
	if err := workflow.Await(ctx, func() bool { return !p.status.Paused }); err != nil {
		return err
	}
	p.status.Step = step
	spec := specOf(step)
	if !p.transitionsOnly || spec.findable {
		if err := p.upsert(ctx, StepKey.ValueSet(step)); err != nil {
			return err
		}
	}
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		if req, ok := arg.(activities.HelperRequest); ok {
			// the helper logs its failure as final only on the workflow's last try
			req.Attempt, req.Attempts = attempt, spec.attempts
			arg = req
		}
		err := p.runOnce(ctx, step, attempt, spec, arg, result)
		if err == nil {
			return nil
		}
		if attempt >= spec.attempts || !activities.Retryable(err) {
			return &stepError{step: step, err: err}
		}
		p.log.Warn("step failed, retrying", "step", step, "attempt", attempt, "error", reason(err))
		if err := workflow.Sleep(ctx, backoff); err != nil {
			return err
		}
		backoff *= 2
	}
}

// runOnce runs the step's activity (with its own retries) once and records it in the timeline.
func (p *provisioner) runOnce(ctx workflow.Context, step string, attempt int, spec stepSpec, arg, result any) error {
	p.stepRuns++
	p.status.Attempt = attempt
	p.status.Timeline = append(p.status.Timeline, StepRecord{Step: step, Started: workflow.Now(ctx)})
	rec := &p.status.Timeline[len(p.status.Timeline)-1]
	err := p.record(rec, p.execute(ctx, spec, arg).Get(ctx, result), result, workflow.Now(ctx))
	if err == nil && spec.attempts > 1 && rec.Attempts == 0 {
		rec.Attempts = 1 // the workflow runs each attempt of this step itself
	}
	return err
}

// record puts how a run of a step ended into its timeline entry.
func (p *provisioner) record(rec *StepRecord, err error, result any, ended time.Time) error {
	rec.Ended = ended
	if err != nil {
		rec.Attempts = failedAttempts(err)
		rec.Error = reason(err)
		p.status.LastError = rec.Error
		return err
	}
	if a, ok := result.(interface{ GetAttempt() int32 }); ok {
		rec.Attempts = a.GetAttempt()
	}
	return nil
}
