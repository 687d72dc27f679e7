package activities

import (
	"errors"

	"go.temporal.io/sdk/temporal"
)

// Verdict is what a failure says, sealed in its details beside the seal of the request it
// answers: its type, whether a retry can cure it, and its message. The failure's own type, flag
// and message travel beside the details in plain fields that whoever fails the attempt by ID
// chooses; the details are encrypted and bound by the codec, so the workflow decides from this
// copy alone, and a failure whose plain fields say otherwise is not the worker's.
type Verdict struct {
	Type         string `json:"type"`
	NonRetryable bool   `json:"non_retryable,omitempty"`
	Message      string `json:"message"`
	Benign       bool   `json:"benign,omitempty"`
}

// Says is true when the failure's plain fields say what the verdict says.
func (v Verdict) Says(app *temporal.ApplicationError) bool {
	return app.Type() == v.Type && app.NonRetryable() == v.NonRetryable && app.Message() == v.Message
}

// Error is the failure as the verdict says it, carrying the attempt and the reply (so a
// timeline can count attempts) and nothing else: no cause whose type could take a decision.
func (v Verdict) Error(attempt int32, reply Seal) error { return v.failure(attempt, reply, nil) }

// SealFailure is err in the form the workflow trusts: an application error whose details carry
// the activity attempt, the seal of the request it answers and its verdict (details are
// payloads: the codec encrypts and binds them).
func SealFailure(err error, attempt int32, reply Seal) error {
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		err = NewError(ErrTypeRPC, err.Error(), err)
		errors.As(err, &app)
	}
	v := Verdict{Type: app.Type(), NonRetryable: app.NonRetryable(), Message: app.Message(),
		Benign: app.Category() == temporal.ApplicationErrorCategoryBenign}
	// the cause is for the worker's log and the operator's eye: the workflow reads the verdict
	return v.failure(attempt, reply, errors.Unwrap(app))
}

func (v Verdict) failure(attempt int32, reply Seal, cause error) error {
	var category temporal.ApplicationErrorCategory
	if v.Benign {
		category = temporal.ApplicationErrorCategoryBenign
	}
	return temporal.NewApplicationErrorWithOptions(v.Message, v.Type, temporal.ApplicationErrorOptions{
		NonRetryable: v.NonRetryable, Cause: cause, Details: []any{attempt, reply, v}, Category: category})
}

// FailureSeal reads the attempt, the seal and the verdict from a failure's details; ok is false
// when it has none or they do not decode (a failure not made by SealFailure, or not readable by
// this codec).
func FailureSeal(err error) (attempt int32, reply Seal, verdict Verdict, ok bool) {
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.HasDetails() {
		return 0, Seal{}, Verdict{}, false
	}
	if app.Details(&attempt, &reply, &verdict) != nil || verdict.Type == "" {
		return 0, Seal{}, Verdict{}, false
	}
	return attempt, reply, verdict, true
}
