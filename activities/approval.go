package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"
)

// Approval is what a signature or a configuration rests on: the replies to the reads and to the
// helper that decided it. Each reply names the run its activity ran in; the sign and configure
// steps act only when that is their own task's run. A run reset past the helper's answer
// replays that answer with the history it copied: a decision received by another run, which the
// reset run does not sign or send on (ErrTypeStaleApproval) but takes again.
type Approval struct {
	Facts []Seal `json:"approved_by"`
}

// GetApproval is the replies the input's effect rests on.
func (a Approval) GetApproval() Approval { return a }

// ErrTypeStaleApproval is the refusal to sign or configure on facts or a decision that this
// task's run did not receive itself: the workflow reads the host and asks the helper again.
const ErrTypeStaleApproval = "StaleApproval"

// ReasonStaleApproval: a sign or configure request resting on another run's replies (activity).
const ReasonStaleApproval = "stale_approval"

// checkApproval refuses an effect whose facts and decision its task's run did not receive.
func checkApproval(ctx context.Context, name string, in any) (reason string, err error) {
	a, ok := in.(interface{ GetApproval() Approval })
	if !ok {
		return "", nil
	}
	run := activity.GetInfo(ctx).WorkflowExecution.RunID
	facts := a.GetApproval().Facts
	if len(facts) == 0 {
		return ReasonStaleApproval, NewError(ErrTypeStaleApproval, name+" refused: the input names no reads and no helper answer it rests on", nil)
	}
	for _, f := range facts {
		if f.RunID != run {
			return ReasonStaleApproval, NewError(ErrTypeStaleApproval, fmt.Sprintf(
				"%s refused: it rests on the %s reply received by run %s, not by this run %s (a reset run: the host is read and the helper asked again)",
				name, f.Step, f.RunID, run), nil)
		}
	}
	return "", nil
}
