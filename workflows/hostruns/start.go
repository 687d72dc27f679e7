package hostruns

import (
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/workflows"
)

// Starter is what every starter of host runs (discovery, the operator CLI, renewal) takes from
// its own configuration.
type Starter struct {
	TaskQueue string
	Site      string
	Fast      bool // temporal.fast_mode: a longer workflow task timeout
}

// Options are the start options of a new run of in's host: the workflow ID, the search
// attributes and the summary the Web UI lists it with. A closed workflow gets a new run (the
// host is back in provisioning mode) and an open one is left alone; the operator CLI narrows both.
func (s Starter) Options(in workflows.ProvisionInput) client.StartWorkflowOptions {
	o := client.StartWorkflowOptions{
		ID:                       workflows.WorkflowID(in.Identity),
		TaskQueue:                s.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes:    workflows.StartSearchAttributes(in.Identity, s.Site, in.Source),
		StaticSummary:            Summary(in.Identity, s.Site, in.Source),
		StaticDetails:            startDetails(in),
	}
	if s.Fast {
		o.WorkflowTaskTimeout = FastModeTaskTimeout
	}
	return o
}

// RetryOptions are the start options of an operator's retry of in's host: a new run only when
// the host's latest run failed (or was canceled, terminated or timed out), and an error, not the
// open run, when one is at work.
func (s Starter) RetryOptions(in workflows.ProvisionInput) client.StartWorkflowOptions {
	o := s.Options(in)
	o.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	o.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED
	o.WorkflowExecutionErrorWhenAlreadyStarted = true
	return o
}

// DefaultTaskTimeout is Temporal's workflow task timeout, which a run started with none gets.
const DefaultTaskTimeout = 10 * time.Second

// FastModeTaskTimeout is the workflow task timeout of a fast-mode run. Its first workflow task
// runs every read, the helper and the signing as local activities; under load a task that overran
// Temporal's default 10 s was timed out and its next attempt ran those steps again. The price: a
// worker killed mid-host leaves its fast-mode hosts for this long before another worker runs them.
const FastModeTaskTimeout = 30 * time.Second

// TaskTimeout is the workflow task timeout of the runs s starts.
func (s Starter) TaskTimeout() time.Duration {
	if s.Fast {
		return FastModeTaskTimeout
	}
	return DefaultTaskTimeout
}

// Summary is a run's one line in the Web UI's workflow list.
func Summary(identity, site, source string) string {
	if site == "" {
		return fmt.Sprintf("%s · found by %s", identity, source)
	}
	return fmt.Sprintf("%s · site %s · found by %s", identity, site, source)
}

func startDetails(in workflows.ProvisionInput) string {
	if in.SeenAt.IsZero() {
		return fmt.Sprintf("Started by %s.", in.Source)
	}
	return fmt.Sprintf("Sighted by %s at %s.", in.Source, in.SeenAt.UTC().Format(time.RFC3339))
}
