package operator

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// fakeClient is a Temporal client whose latest run of every host has status, and that records
// the starts it is asked for.
type fakeClient struct {
	client.Client
	status enumspb.WorkflowExecutionStatus
	// workflowType is the latest run's type ("": the provisioner's)
	workflowType string
	starts       []client.StartWorkflowOptions
	inputs       []workflows.ProvisionInput
}

func (f *fakeClient) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: f.status,
		Type: &commonpb.WorkflowType{Name: f.typeName()}, TaskQueue: "tq"}}, nil
}

func (f *fakeClient) typeName() string {
	if f.workflowType != "" {
		return f.workflowType
	}
	return workflows.WorkflowName
}

func (f *fakeClient) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	f.starts = append(f.starts, o)
	f.inputs = append(f.inputs, args[0].(workflows.ProvisionInput))
	return nil, nil
}

// A retry starts the host's run with the starter's options (the same workflow ID, search
// attributes and summary as discovery's), narrowed to a host whose latest run failed.
func TestRetryStartsWithTheStartersOptionsNarrowed(t *testing.T) {
	fc := &fakeClient{status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED}
	st := hostruns.Starter{TaskQueue: "tq", Site: "lab"}
	o := &Operator{C: fc, Starter: st, TaskQueue: "tq"}
	require.NoError(t, o.Retry(context.Background(), "n1.example"))
	require.Len(t, fc.starts, 1)
	in := workflows.ProvisionInput{Identity: "n1.example", Source: workflows.SourceOperator}
	require.Equal(t, in, fc.inputs[0])
	got, base := fc.starts[0], st.Options(in)
	require.Equal(t, base.ID, got.ID)
	require.Equal(t, base.TaskQueue, got.TaskQueue)
	require.Equal(t, base.StaticSummary, got.StaticSummary)
	require.Equal(t, base.TypedSearchAttributes, got.TypedSearchAttributes)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY, got.WorkflowIDReusePolicy)
	require.True(t, got.WorkflowExecutionErrorWhenAlreadyStarted, "an open run is an error, not a run to join")

	// a provisioned host is not retried, and nothing is started
	fc = &fakeClient{status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}
	o.C = fc
	require.ErrorIs(t, o.Retry(context.Background(), "n1.example"), ErrNotFailed)
	require.Empty(t, fc.starts)

	// nor is a host whose latest run someone else started under its ID
	fc = &fakeClient{status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, workflowType: "Squat"}
	o.C = fc
	require.ErrorIs(t, o.Retry(context.Background(), "n1.example"), ErrNotOurs)
	require.Empty(t, fc.starts)
}

// Failure messages are encrypted in history: operators read them with the codec key, and are
// told what is missing without it.
func TestFailureReasonsAreDecrypted(t *testing.T) {
	c, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	worker := converter.WithFailureConverterSerializationContext(codec.FailureConverter(codec.DataConverter(c.Worker(nil))),
		converter.WorkflowSerializationContext{WorkflowID: "provision:n1"})
	f := worker.ErrorToFailure(temporal.NewNonRetryableApplicationError("step helper: helper exited 1", "ProvisionFailed", nil))
	require.Equal(t, "Encoded failure", f.GetMessage())

	require.Equal(t, "step helper: helper exited 1", (&Operator{DC: codec.DataConverter(c)}).message(f))
	other, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	require.Contains(t, (&Operator{DC: codec.DataConverter(other)}).message(f), "needs the codec key")
	require.Equal(t, "Encoded failure", f.GetMessage(), "the event is left as it was")
	plain := temporal.GetDefaultFailureConverter().ErrorToFailure(temporal.NewApplicationError("timed out", ""))
	require.Equal(t, "timed out", (&Operator{DC: codec.DataConverter(c)}).message(plain))
}
