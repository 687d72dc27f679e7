package workflows

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/choria-temporal/provisioner/activities"
)

// Histories recorded from real runs (internal/integration, WRITE_REPLAY_HISTORY) must replay
// against the current ProvisionHost and ProvisionerControl: a change that breaks this breaks every
// running workflow.
// When a change must alter the command sequence, give it a new version in ProvisionInput.Version
// (api.go) and record a new history beside the old ones.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		r := worker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(ProvisionHost, workflow.RegisterOptions{Name: WorkflowName})
		r.RegisterWorkflowWithOptions(ProvisionerControl, workflow.RegisterOptions{Name: ControlWorkflowName})
		require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f), f)
	}
}

// A run's helper call goes to the run's own task queue when the worker completing its task has a
// helper slot free, and to the helper task queue otherwise (helperHere); replay asks no process
// and so chooses the helper queue. This recorded run went the other way, and must replay all the
// same: replay matches an activity by ID and type, not by task queue.
func TestReplayIgnoresWhereTheHelperWent(t *testing.T) {
	const f = "testdata/provision-ed25519-v6-helper-here.json"
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	var hist historypb.History
	require.NoError(t, protojson.Unmarshal(b, &hist))
	var helperQueue, runQueue string
	for _, ev := range hist.GetEvents() {
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			runQueue = a.GetTaskQueue().GetName()
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == activities.RunHelperName {
			helperQueue = a.GetTaskQueue().GetName()
		}
	}
	require.NotEmpty(t, runQueue)
	require.Equal(t, runQueue, helperQueue, "the recorded helper call stayed on the run's own task queue")

	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(ProvisionHost, workflow.RegisterOptions{Name: WorkflowName})
	require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
}
