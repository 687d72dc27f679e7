package renewal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"
)

// Histories recorded from real renewal runs (internal/integration, WRITE_REPLAY_HISTORY=<this
// package's testdata>) must replay against RenewIdentities as a worker registers it: a Schedule
// run can outlive a deployment. The replayer's policy is empty on purpose: a run follows the
// policy its history recorded, never the replaying worker's.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	for _, path := range []string{"renewal-unreachable", "renewal-scale"} {
		require.Contains(t, files, filepath.Join("testdata", path+".json"))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var hist historypb.History
		require.NoError(t, protojson.Unmarshal(b, &hist))
		r := worker.NewWorkflowReplayer()
		Workflow{}.Register(r)
		require.NoError(t, r.ReplayWorkflowHistory(nil, &hist), f)
	}
}
