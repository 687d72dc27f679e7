package workflows

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/choria-temporal/provisioner/activities"
)

// workflowIDPrefix begins the workflow ID of every host.
const workflowIDPrefix = activities.HostWorkflowIDPrefix

// WorkflowID is the one workflow ID of a host: it depends on the identity alone, so every replica
// and every sighting addresses the same workflow.
func WorkflowID(identity string) string { return workflowIDPrefix + identity }

// IdentityFromWorkflowID is the host of a workflow ID made by WorkflowID; ok is false for any
// other workflow (the control workflow, for one).
func IdentityFromWorkflowID(id string) (identity string, ok bool) {
	return strings.CutPrefix(id, workflowIDPrefix)
}

// HelperTaskQueue is the task queue of the helper calls of runs on taskQueue. It is derived from
// the run's own queue, never read from its input: a run cannot send its helper call to a queue
// that someone else polls.
func HelperTaskQueue(taskQueue string) string { return taskQueue + "-helper" }

// ErrInvalidIdentity is returned for identities that cannot be a Choria identity.
var ErrInvalidIdentity = errors.New("invalid identity")

// MaxIdentityLength bounds identities; Choria identities are host names.
const MaxIdentityLength = 253

// ValidateIdentity rejects what cannot be a host identity before it becomes a workflow: empty,
// too long, control or space characters, and NATS subject wildcards.
func ValidateIdentity(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidIdentity)
	}
	if len(id) > MaxIdentityLength {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidIdentity, len(id), MaxIdentityLength)
	}
	for _, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == '*' || r == '>' || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: %q contains %q", ErrInvalidIdentity, id, r)
		}
	}
	return nil
}
