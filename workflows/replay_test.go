package workflows

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
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
		r := worker.NewWorkflowReplayer()
		Register(r, Policy{})
		require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f), f)
	}
}
