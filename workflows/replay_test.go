package workflows

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
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
