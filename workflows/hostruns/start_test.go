package hostruns

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/workflows"
)

// A start gives the run what ProvisionHost expects to find at its first task (its ID and its
// start search attributes: the workflows tests start their runs with these alone), so the run
// upserts nothing to correct them.
func TestOptionsStartTheRunTheWorkflowExpects(t *testing.T) {
	in := workflows.ProvisionInput{Identity: "n1.example", Source: workflows.SourceEvent, SeenAt: time.Unix(1700000000, 0)}
	o := Starter{TaskQueue: "tq", Site: "lab"}.Options(in)
	require.Equal(t, workflows.WorkflowID("n1.example"), o.ID)
	require.Equal(t, "tq", o.TaskQueue)
	require.Equal(t, workflows.StartSearchAttributes("n1.example", "lab", workflows.SourceEvent), o.TypedSearchAttributes)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING, o.WorkflowIDConflictPolicy, "an open run is left alone")
	require.Equal(t, "Sighted by event at 2023-11-14T22:13:20Z.", o.StaticDetails)
	require.Zero(t, o.WorkflowTaskTimeout, "Temporal's default")
	require.Equal(t, DefaultTaskTimeout, Starter{}.TaskTimeout())

	fast := Starter{TaskQueue: "tq", Fast: true}
	require.Equal(t, FastModeTaskTimeout, fast.Options(in).WorkflowTaskTimeout)
	require.Equal(t, FastModeTaskTimeout, fast.TaskTimeout())
}

// A retry starts a run only after a failed one, and says so when a run is at work.
func TestRetryOptionsNarrowTheStart(t *testing.T) {
	o := Starter{TaskQueue: "tq"}.RetryOptions(workflows.ProvisionInput{Identity: "n1.example", Source: workflows.SourceOperator})
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY, o.WorkflowIDReusePolicy)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED, o.WorkflowIDConflictPolicy)
	require.True(t, o.WorkflowExecutionErrorWhenAlreadyStarted)
	require.Equal(t, "Started by operator.", o.StaticDetails)
}
