package workflows

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/choria-temporal/provisioner/internal/signalgate"
)

// Histories recorded from real runs of the current workflow (internal/integration,
// WRITE_REPLAY_HISTORY) must replay against ProvisionHost and ProvisionerControl as a worker
// registers them (Register). From the first release on, a change that breaks this breaks every
// running workflow: it follows the upgrade story in docs/architecture.md and keeps the
// released histories here. The replayer is registered with an empty policy on purpose: a run
// follows the policy its history recorded, never the replaying worker's.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	// every path the workflow has: each a real run's history
	for _, path := range []string{"provision-ed25519", "provision-pki", "provision-pki-denied-csr", "provision-defer-helper-failures",
		"provision-shutdown", "provision-upgrade", "provision-paused-in-helper", "provision-fast", "control-pause-resume"} {
		require.Contains(t, files, filepath.Join("testdata", path+".json"))
	}
	for _, f := range files {
		hist := readHistory(t, f)
		// as a worker verifies pause and resume requests (the recorded payloads are decoded)
		r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
			Interceptors: []interceptor.WorkerInterceptor{signalgate.Interceptor(ControlSignals(converter.GetDefaultDataConverter(), nil).Watch)}})
		require.NoError(t, err)
		Register(r, Policy{})
		require.NoError(t, r.ReplayWorkflowHistoryWithOptions(nil, hist, worker.ReplayWorkflowHistoryOptions{
			OriginalExecution: workflow.Execution{ID: recordedWorkflowID(t, hist)}}), f)
	}
}

func readHistory(t *testing.T, file string) *historypb.History {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var hist historypb.History
	require.NoError(t, protojson.Unmarshal(b, &hist))
	return &hist
}

// recordedWorkflowID is the workflow ID a recorded run had (a history does not carry it): the
// host's, from its input, or the control workflow's, from its task queue.
func recordedWorkflowID(t *testing.T, hist *historypb.History) string {
	t.Helper()
	start := hist.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
	require.NotNil(t, start)
	if start.GetWorkflowType().GetName() == ControlWorkflowName {
		return ControlWorkflowID(start.GetTaskQueue().GetName())
	}
	var in struct {
		Identity string `json:"identity"`
	}
	require.NoError(t, json.Unmarshal(start.GetInput().GetPayloads()[0].GetData(), &in))
	return WorkflowID(in.Identity)
}
