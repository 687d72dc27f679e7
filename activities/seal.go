package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
)

// Seal names one request a host's run made: which run (its random nonce, recorded once per run
// with its policy, and its run ID), which step, which request of the run (Seq) and when it was
// scheduled (At, the workflow task's time). The workflow writes it into every activity input as
// Request; the activity acts only when the input's run ID is its task's run and its step is its
// own, and echoes the seal as Reply in its result and in its failure's details. The workflow
// accepts a result or a failure only when its Reply is the request it sent. With the codec a
// seal cannot be forged or altered: payloads are encrypted and bound to the host's workflow, so
// the only seals a namespace client can present are those of payloads it copies, which name
// another run (nonce), another request (Seq) or another workflow task (At).
type Seal struct {
	Run   string    `json:"run"`    // the run's nonce
	RunID string    `json:"run_id"` // the run that scheduled the request (the activity checks it)
	Step  string    `json:"step"`
	Seq   int       `json:"seq"`
	At    time.Time `json:"at"`
}

// Answers is true when a reply sealed with s answers the request req. The run ID is not
// compared: after a reset, the replayed results carry the reset run's ID, and the nonce, copied
// with the history, names the run.
func (s Seal) Answers(req Seal) bool {
	return req.Run != "" && s.Run == req.Run && s.Step == req.Step && s.Seq == req.Seq && s.At.Equal(req.At)
}

func (s Seal) String() string {
	return fmt.Sprintf("%s request %d of run %.8s at %s", s.Step, s.Seq, s.Run, s.At.UTC().Format(time.RFC3339Nano))
}

// Requested is embedded in every activity input: the seal of the request (the workflow writes it).
type Requested struct {
	Request Seal `json:"request"`
}

// GetRequest is the seal of the request the input was written for.
func (r Requested) GetRequest() Seal { return r.Request }

// sealedInput is an activity input the workflow seals: an input type without its WithRequest
// does not compile into a registration (wrap).
type sealedInput interface {
	identified
	GetRequest() Seal
	WithRequest(Seal) any
}

// WithRequest returns the input sealed for the request s (the workflow's one way to seal an input).
func (in HostInput) WithRequest(s Seal) any      { in.Request = s; return in }
func (in HelperRequest) WithRequest(s Seal) any  { in.Request = s; return in }
func (in SignInput) WithRequest(s Seal) any      { in.Request = s; return in }
func (in ConfigureInput) WithRequest(s Seal) any { in.Request = s; return in }
func (in UpgradeInput) WithRequest(s Seal) any   { in.Request = s; return in }
func (in RestartInput) WithRequest(s Seal) any   { in.Request = s; return in }

// GetReply is the seal a result answers.
func (a *Attempted) GetReply() Seal { return a.Reply }

// SetReply seals the result as the answer to the request s (the activities' wrapper; fakes in tests).
func (a *Attempted) SetReply(s Seal) { a.Reply = s }

// Reasons the worker refuses a request or a reply (the reason label of
// choria_provisioner_refused_payloads).
const (
	// an input not written by the run that scheduled the task, or for another step (activity)
	ReasonForeignRequest = "foreign_request"
	// a result that does not answer the request the run sent (workflow)
	ReasonForeignResult = "foreign_result"
	// a failure that does not carry the seal of the request the run sent (workflow)
	ReasonUnsealedFailure = "unsealed_failure"
	// a sealed failure whose plain type, flag or message differ from its sealed verdict: the
	// worker's details copied under another failure (workflow)
	ReasonAlteredFailure = "altered_failure"
)

// ErrTypeOtherRun is the refusal of an input written by another run of the host's workflow. A
// reset run meets it for the tasks its copied history scheduled before the reset point: the
// workflow runs such a request again, once, with a seal of its own run (a forged one costs one
// retry).
const ErrTypeOtherRun = "RefusedOtherRun"

// ErrTypeUntrusted is the type of a failure the workflow did not find sealed for its request
// (and of a timeout or cancellation made by the server): generic and retryable, its text
// cleaned and bounded; no decision is taken on it.
const ErrTypeUntrusted = "UntrustedFailure"

// checkRequest refuses an input that its task's run did not write for the activity's step.
func checkRequest(ctx context.Context, step string, req Seal) (reason string, err error) {
	info := activity.GetInfo(ctx)
	switch {
	case req.Run == "" || req.Step != step:
		return ReasonForeignRequest, NewError(ErrTypeRefused, fmt.Sprintf(
			"%s refused: the input is not sealed for this step (sealed for %q): the run did not write it for %s", info.ActivityType.Name, req.Step, step), nil)
	case req.RunID != info.WorkflowExecution.RunID:
		return ReasonForeignRequest, NewError(ErrTypeOtherRun, fmt.Sprintf(
			"%s refused: the input was written by run %s of the workflow, not by this task's run %s", info.ActivityType.Name, req.RunID, info.WorkflowExecution.RunID), nil)
	}
	return "", nil
}

// SignResult is SignServerJWT's result: the server JWT.
type SignResult struct {
	Attempted
	JWT string `json:"jwt"`
	// Signer is the signing key's ID (SignerKeyID): what the identity's record names
	Signer string `json:"signer,omitempty"`
}

// identified is an activity input that names its host.
type identified interface{ HostIdentity() string }

// HostIdentity names the host of each activity input (logs and errors).
func (in HostInput) HostIdentity() string      { return in.Identity }
func (in HelperRequest) HostIdentity() string  { return in.Input.Identity }
func (in SignInput) HostIdentity() string      { return in.Identity }
func (in ConfigureInput) HostIdentity() string { return in.Identity }
func (in UpgradeInput) HostIdentity() string   { return in.Identity }
func (in RestartInput) HostIdentity() string   { return in.Identity }

// Attempted is embedded in every activity result: the activity attempt that produced it, so the
// workflow's timeline can show how many tries a step took (Temporal does not tell the workflow),
// and Reply, the seal of the request it answers (the activities' wrapper sets both). The field
// names differ from an input's (Request): an input payload never passes for a result.
type Attempted struct {
	Attempt int32 `json:"attempt,omitempty"`
	Reply   Seal  `json:"reply,omitzero"`
}

// GetAttempt returns the attempt that produced the result.
func (a *Attempted) GetAttempt() int32 { return a.Attempt }

func (a *Attempted) setAttempt(n int32) { a.Attempt = n }
