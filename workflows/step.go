package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// step runs one step with its row of the step table and records each run in the timeline.
// Steps with workflow-level attempts (the helper) retry here rather than in the activity.
func (p *provisioner) step(ctx workflow.Context, step string, arg any, result any) error {
	if err := p.awaitResume(ctx); err != nil {
		return err
	}
	p.status.Step = step
	spec := specOf(step)
	p.details(ctx, step+": "+spec.summary)
	if spec.findable() {
		if err := p.upsert(ctx, StepKey.ValueSet(step)); err != nil {
			return err
		}
	}
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		if req, ok := arg.(activities.HelperRequest); ok {
			// the helper logs its failure as final only on the workflow's last try
			req.Attempt, req.Attempts = attempt, spec.attempts()
			arg = req
		}
		err := p.runOnce(ctx, step, attempt, spec, arg, result)
		if err == nil {
			return nil
		}
		if attempt >= spec.attempts() || !activities.Retryable(err) {
			return &stepError{step: step, err: err}
		}
		p.log.Warn("step failed, retrying", "step", step, "attempt", attempt, "error", reason(err))
		if err := p.sleep(ctx, backoff, "retrying "+step+" after: "+reason(err)); err != nil {
			return err
		}
		backoff *= 2
	}
}

// awaitResume holds the host while provisioning is paused fleet-wide, before its next RPC.
func (p *provisioner) awaitResume(ctx workflow.Context) error {
	if p.status.Paused {
		p.details(ctx, "paused: provisioning is paused fleet-wide (hosts resume)")
	}
	return workflow.Await(ctx, func() bool { return !p.status.Paused })
}

// runOnce runs the step's activity (with its own retries) once and records it in the timeline.
func (p *provisioner) runOnce(ctx workflow.Context, step string, attempt int, spec stepSpec, arg, result any) error {
	p.status.Attempt = attempt
	at := p.begin(ctx, step)
	err := p.record(at, p.call(ctx, step, spec, arg, result), result, workflow.Now(ctx))
	if err == nil && spec.attempts() > 1 && p.status.Timeline[at].Attempts == 0 {
		p.status.Timeline[at].Attempts = 1 // the workflow runs each attempt of this step itself
	}
	return err
}

// call sends one request of step and waits for its accepted outcome (ask).
func (p *provisioner) call(ctx workflow.Context, step string, spec stepSpec, arg, result any) error {
	sel := workflow.NewSelector(ctx)
	var err error
	done := false
	p.ask(ctx, sel, step, spec, arg, result, func(e error) { err, done = e, true })
	for !done {
		sel.Select(ctx)
	}
	return err
}

// ask sends one request of step and, when sel selects its outcome, hands done that outcome as
// accepted when sealed for the request (verify). A request that a reset run's copied history
// scheduled is refused by the activity as another run's (ErrTypeOtherRun): it is sent again,
// once, sealed by this run, and done waits for that one. The one resend of every step.
func (p *provisioner) ask(ctx workflow.Context, sel workflow.Selector, step string, spec stepSpec, arg, result any, done func(error)) {
	var send func(again bool)
	send = func(again bool) {
		req := p.send(ctx, step, spec, arg)
		sel.AddFuture(req.fut, func(fut workflow.Future) {
			err := p.verify(ctx, req.seal, fut.Get(ctx, result), result)
			if otherRun(err) && !again {
				send(true)
				return
			}
			done(err)
		})
	}
	send(false)
}

// begin opens a timeline entry for a run of step and returns its index.
func (p *provisioner) begin(ctx workflow.Context, step string) int {
	p.status.Timeline = append(p.status.Timeline, StepRecord{Step: step, Started: workflow.Now(ctx)})
	return len(p.status.Timeline) - 1
}

// record puts how the run of a step at index at of the timeline ended into its entry.
func (p *provisioner) record(at int, err error, result any, ended time.Time) error {
	rec := &p.status.Timeline[at]
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

// sleep waits on a durable timer that the Web UI shows with why.
func (p *provisioner) sleep(ctx workflow.Context, d time.Duration, why string) error {
	return workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: why}).Get(ctx, nil)
}

// details is what the Web UI's host page says the run is doing now (its current details).
func (p *provisioner) details(ctx workflow.Context, now string) {
	workflow.SetCurrentDetails(ctx, now)
}
