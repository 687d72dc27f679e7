package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/textsafe"
)

// ErrTypeProvisionFailed is the error type of a host's workflow that ran out of retries or met a
// policy outcome; its message names the step and the reason.
const ErrTypeProvisionFailed = "ProvisionFailed"

// staleSighting is true when a read that carried the sighting time found the server out of
// provisioning mode and Temporal confirms it: an earlier run of the host completed after the
// sighting that started this one (activities.RunHistory). A host's own word is never enough.
func staleSighting(err error) bool {
	var se *stepError
	return errors.As(err, &se) && se.stale
}

func notProvisioning(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == activities.ErrTypeNotProvisioning
}

func (p *provisioner) deferHost(ctx workflow.Context, msg string) error {
	p.status.Defers++
	p.status.Outcome = OutcomeDeferred
	p.status.Step = StepDeferred
	p.status.Message = "deferred by the helper: " + msg
	p.log.Info("helper deferred the host", "msg", msg, "defers", p.status.Defers)

	if p.status.Defers >= p.policy.MaxDefers {
		return p.fail(ctx, fmt.Errorf("the helper deferred the host %d times, the limit", p.status.Defers))
	}
	if err := p.upsert(ctx, StepKey.ValueSet(StepDeferred), OutcomeKey.ValueSet(OutcomeDeferred)); err != nil {
		return err
	}
	until := workflow.Now(ctx).Add(p.policy.DeferDelay).UTC().Format("15:04:05 MST")
	why := fmt.Sprintf("deferred by the helper until %s (%d of at most %d): %s", until, p.status.Defers, p.policy.MaxDefers, msg)
	p.details(ctx, why)
	if err := p.sleep(ctx, p.policy.DeferDelay, why); err != nil {
		return err
	}
	// before a continue-as-new too: the continuation starts with this run's search attributes as
	// they are now, and it is running again
	p.status.Outcome = OutcomeRunning
	if err := p.upsert(ctx, OutcomeKey.ValueSet(OutcomeRunning)); err != nil {
		return err
	}
	if p.status.Defers-p.in.Defers >= continueAsNewDefers {
		// the same sighting, waited on: its source stays; its time is the first pass's only
		next := ProvisionInput{Identity: p.in.Identity, Source: p.in.Source, Defers: p.status.Defers}
		return workflow.NewContinueAsNewError(ctx, WorkflowName, next) // by name: workers register a method value
	}
	return nil
}

func (p *provisioner) finish(ctx workflow.Context, outcome, msg string) (*ProvisionResult, error) {
	p.status.Outcome = outcome
	p.status.Step = StepDone
	p.status.Message = msg
	updates := []temporal.SearchAttributeUpdate{StepKey.ValueSet(StepDone), OutcomeKey.ValueSet(outcome)}
	issued := p.status.Issued
	if outcome != OutcomeProvisioned {
		issued = nil // configured, then shut down or failed to restart: the host does not hold it
	}
	if issued != nil {
		// in the same upsert as the outcome: the record costs no event
		updates = append(updates, IssuedKey.ValueSet(issued.Issued), ExpiresKey.ValueSet(issued.Expires), SignerKey.ValueSet(issued.Signer))
	}
	if err := p.upsert(ctx, updates...); err != nil {
		return nil, err
	}
	p.log.Info("host finished", "outcome", outcome)
	p.details(ctx, outcome+": "+msg)
	res := &ProvisionResult{Identity: p.in.Identity, Outcome: outcome, Message: msg, Issued: issued}
	if !p.restartedAt.IsZero() {
		res.RestartedAt, res.RestartSplay = p.restartedAt, p.policy.RestartSplay
	}
	return res, nil
}

// fail ends the workflow in the failed state with the reason: the failed step stays in
// ProvisionStep, and the workflow's failure message says what went wrong.
func (p *provisioner) fail(ctx workflow.Context, err error) error {
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return err
	}
	p.status.Outcome = OutcomeFailed
	p.status.Message = reason(err)
	updates := []temporal.SearchAttributeUpdate{OutcomeKey.ValueSet(OutcomeFailed), ErrorKey.ValueSet(failureType(err))}
	if p.status.Step != "" {
		updates = append(updates, StepKey.ValueSet(p.status.Step)) // where it failed
	}
	if uerr := p.upsert(ctx, updates...); uerr != nil {
		return uerr
	}
	p.log.Error("host failed", "error", p.status.Message)
	p.details(ctx, "failed at "+p.status.Step+": "+p.status.Message)
	return temporal.NewNonRetryableApplicationError(p.status.Message, ErrTypeProvisionFailed, err)
}

func (p *provisioner) upsert(ctx workflow.Context, updates ...temporal.SearchAttributeUpdate) error {
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		return fmt.Errorf("upserting search attributes: %w", err)
	}
	return nil
}

// failedAttempts reads the attempt count the activity put in its error's details.
// staleApproval is the sign or configure step's refusal of a decision another run received.
func staleApproval(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == activities.ErrTypeStaleApproval
}

func failedAttempts(err error) int32 {
	var app *temporal.ApplicationError
	var n int32
	if errors.As(err, &app) && app.HasDetails() && app.Details(&n) == nil {
		return n
	}
	return 0
}

type stepError struct {
	step  string
	err   error
	stale bool // a read of the sighting found the host provisioned since (staleSighting)
}

func (e *stepError) Error() string { return fmt.Sprintf("step %s: %s", e.step, reason(e.err)) }
func (e *stepError) Unwrap() error { return e.err }

// reason digs the application error's own message out of Temporal's activity error wrapping,
// prefixed with the step it failed in.
// failureType names what a run failed with, from the provisioner's own vocabulary: the error type
// of the sealed failure or of the workflow's own decision (an unsealed failure is already an
// UntrustedFailure), "Timeout" for a timeout. Never the message: it is not for plain text.
func failureType(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() != "" {
		return textsafe.Clean(app.Type(), 64)
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return "Timeout"
	}
	return ErrTypeProvisionFailed
}

func reason(err error) string {
	var se *stepError
	if errors.As(err, &se) {
		return se.Error()
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		if app.Type() != "" {
			return fmt.Sprintf("%s (%s)", app.Message(), app.Type())
		}
		return app.Message()
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return "timed out: " + timeout.Error()
	}
	return err.Error()
}
