package workflows

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/textsafe"
)

// Hooks tell the worker what a run refused and when its recorded policy is not the worker's.
// They are called outside replay only and make no commands, so they never bear on determinism.
type Hooks struct {
	// Refused hears of each result or failure refused (activities.ReasonForeignResult,
	// activities.ReasonUnsealedFailure).
	Refused func(reason, workflowID, detail string)
	// PolicyDrift hears that a run decides with a policy recorded under another configuration
	// (a run that outlived a configuration change, or a reset run).
	PolicyDrift func(workflowID, recorded, current string)
}

// pinned is what a run records once, in its first workflow task (one side effect): the worker's
// policy, the digest of the configuration it came from, and the run's random nonce, which seals
// every request of the run. A reset run replays the copied side effect: same policy, same nonce.
type pinned struct {
	Policy Policy `json:"policy"`
	Digest string `json:"digest"`
	Nonce  string `json:"nonce"`
}

// UnmarshalJSON decodes strictly: a recorded policy with a field this worker does not know
// fails the workflow task (the run waits for a worker that knows it) rather than being read
// loosely.
func (p *pinned) UnmarshalJSON(b []byte) error {
	type plain pinned
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v plain
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("the recorded policy is not one this worker knows: %w", err)
	}
	if v.Nonce == "" || v.Digest == "" {
		return errors.New("the recorded policy has no nonce or digest")
	}
	*p = pinned(v)
	return nil
}

// Digest names the policy's configuration: equal digests, equal decisions.
func (p Policy) Digest() string {
	b, err := json.Marshal(p.withDefaults())
	if err != nil {
		panic(err) // a Policy always marshals
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func newNonce() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// pin records the worker's policy with its digest and a fresh nonce, and reports a difference
// between the recorded digest and the worker's current one.
func (p *provisioner) pin(ctx workflow.Context, current Policy) error {
	var rec pinned
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		return pinned{Policy: current.withDefaults(), Digest: current.Digest(), Nonce: newNonce()}
	}).Get(&rec)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("recording the worker's policy: %v", err), ErrTypeProvisionFailed, err)
	}
	p.policy, p.nonce, p.digest, p.current = rec.Policy, rec.Nonce, rec.Digest, current.Digest()
	return nil
}

// drift reports, once per run in this worker and outside replay, that the run decides with a
// policy recorded under a configuration other than this worker's (a worker that replays a run
// from its start does so in replay: it reports at the run's next request).
func (p *provisioner) drift(ctx workflow.Context) {
	if p.digest == p.current || p.drifted || workflow.IsReplaying(ctx) {
		return
	}
	p.drifted = true
	if p.hooks.PolicyDrift != nil { // the worker logs and counts it
		p.hooks.PolicyDrift(workflow.GetInfo(ctx).WorkflowExecution.ID, p.digest, p.current)
	}
}

// sealed is an activity input the run seals for each request.
type sealed interface{ WithRequest(activities.Seal) any }

// request is one request the run sent: its seal, and the activity's future.
type request struct {
	seal activities.Seal
	fut  workflow.Future
}

// send seals arg for a new request of step and starts the step's activity.
func (p *provisioner) send(ctx workflow.Context, step string, spec stepSpec, arg any) request {
	p.drift(ctx)
	p.seq++
	info := workflow.GetInfo(ctx)
	seal := activities.Seal{Run: p.nonce, RunID: info.WorkflowExecution.RunID, Step: step, Seq: p.seq, At: workflow.Now(ctx)}
	if s, ok := arg.(sealed); ok {
		arg = s.WithRequest(seal)
	}
	return request{seal: seal, fut: p.execute(ctx, spec, arg)}
}

// verify accepts a request's outcome only when sealed for the request: a result whose Reply is
// not this request is refused (the step fails, not retryable); a failure without this request's
// seal is untrusted: generic, retryable, its text cleaned, its type ignored.
func (p *provisioner) verify(ctx workflow.Context, req activities.Seal, err error, result any) error {
	if err == nil {
		r, ok := result.(interface{ GetReply() activities.Seal })
		if ok && r.GetReply().Answers(req) {
			return nil
		}
		reply := activities.Seal{}
		if ok {
			reply = r.GetReply()
		}
		return p.refuse(ctx, activities.ReasonForeignResult, activities.NewError(activities.ErrTypeRefused, fmt.Sprintf(
			"%s result refused: it does not answer the request this run sent (%s), it answers %s", req.Step, req, describe(reply)), nil))
	}
	if ctx.Err() != nil {
		return err // the run itself is cancelled
	}
	// A failure without this request's seal: one the server made (a timeout, a cancellation: an
	// activity that did not finish) or one from a namespace client. A fresh error that wraps
	// nothing of it, so no type in its chain (NoReply, NotInProvisioningMode) takes a decision.
	untrusted := activities.NewError(activities.ErrTypeUntrusted, textsafe.Clean(reason(err), maxUntrustedText), nil)
	var app *temporal.ApplicationError
	attempt, reply, verdict, sealed := activities.FailureSeal(err)
	switch {
	case timedOut(err):
		return untrusted // the server's: not a refusal, but no seal either
	case !errors.As(err, &app) || !sealed || !reply.Answers(req):
		return p.refuse(ctx, activities.ReasonUnsealedFailure, untrusted)
	case !verdict.Says(app):
		// the worker's own details under a type, flag or message of someone else's choosing
		return p.refuse(ctx, activities.ReasonAlteredFailure, activities.NewError(activities.ErrTypeUntrusted,
			textsafe.Clean(fmt.Sprintf("%s failure refused: its type, retry flag or message differ from what the worker sealed (%s)",
				req.Step, reason(err)), maxUntrustedText), nil))
	}
	// decided from the sealed copy alone: nothing of the plain failure reaches a decision
	return verdict.Error(attempt, reply)
}

// maxUntrustedText bounds what an untrusted failure puts in the status, history and logs.
const maxUntrustedText = 512

// timedOut is a timeout the server reports (start-to-close, heartbeat, schedule-to-close).
func timedOut(err error) bool {
	var timeout *temporal.TimeoutError
	return errors.As(err, &timeout)
}

// otherRun is the activity's sealed refusal of an input written before a reset: run again once.
func otherRun(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == activities.ErrTypeOtherRun
}

// refuse counts a refusal (outside replay) and returns err.
func (p *provisioner) refuse(ctx workflow.Context, reason string, err error) error {
	if !workflow.IsReplaying(ctx) && p.hooks.Refused != nil {
		p.hooks.Refused(reason, workflow.GetInfo(ctx).WorkflowExecution.ID, err.Error())
	}
	return err
}

func describe(s activities.Seal) string {
	if s.Run == "" {
		return "no request"
	}
	return s.String()
}
