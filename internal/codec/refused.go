package codec

import (
	"errors"
	"fmt"
)

// Reasons a worker's codec refuses a payload (RefusedError.Reason, the reason label of
// choria_provisioner_refused_payloads).
const (
	ReasonPlaintext      = "plaintext"       // not encrypted
	ReasonUnknownKey     = "unknown_key"     // encrypted with a key the worker does not hold
	ReasonUndecryptable  = "undecryptable"   // altered, or sealed for another binding than its label says
	ReasonUnbound        = "unbound"         // bound to no workflow (codec-server's /encode makes such payloads)
	ReasonForeignBinding = "foreign_binding" // written for another workflow
)

// ErrTypeRefused is the Temporal error type of a refused payload (FailureConverter), and of a
// task the activities refuse: not retryable.
const ErrTypeRefused = "Refused"

// ErrRefused is matched (errors.Is) by every RefusedError.
var ErrRefused = errors.New("payload refused")

// RefusedError is a payload the worker's codec refused.
type RefusedError struct {
	Reason string
	// WorkflowID is the workflow decoded for, "" when the SDK did not say.
	WorkflowID string
	// Binding is the workflow the payload says it was written for, KeyID its key.
	Binding, KeyID string
}

func (e *RefusedError) Error() string {
	what := map[string]string{
		ReasonPlaintext:      "it is not encrypted with the provisioner's codec key",
		ReasonUnknownKey:     fmt.Sprintf("it is encrypted with key %q, which the provisioner does not hold", e.KeyID),
		ReasonUndecryptable:  "it does not decrypt with the provisioner's key (altered, or not sealed for this workflow)",
		ReasonUnbound:        "it is bound to no workflow (written before payloads were bound, or by another program)",
		ReasonForeignBinding: fmt.Sprintf("it was written for workflow %q", e.Binding),
	}[e.Reason]
	if what == "" {
		what = e.Reason
	}
	if e.WorkflowID == "" {
		return fmt.Sprintf("%v: %s", ErrRefused, what)
	}
	return fmt.Sprintf("%v for workflow %q: %s", ErrRefused, e.WorkflowID, what)
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }
