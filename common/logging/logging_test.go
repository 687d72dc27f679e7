package logging

import (
	"testing"

	"github.com/stretchr/testify/require"
	tlog "go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The SDK's loggers carry their fields as zap's With would: before the entry's own, each With
// adding to its parent's, at the entry's level.
func TestTemporalWithKeepsFieldsPerLogger(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	root := NewTemporal(zap.New(core))
	wf := root.With("WorkflowID", "provision:n1", "RunID", "r1")
	step := wf.(tlog.WithLogger).With("step", "jwt")

	step.Info("step done", "attempt", 2)
	wf.Warn("run warned")
	root.Error("plain")
	step.Debug("below the level")

	entries := logs.AllUntimed()
	require.Len(t, entries, 3)
	require.Equal(t, zapcore.InfoLevel, entries[0].Level)
	require.Equal(t, map[string]any{"WorkflowID": "provision:n1", "RunID": "r1", "step": "jwt", "attempt": int64(2)}, entries[0].ContextMap())
	require.Equal(t, []string{"WorkflowID", "RunID", "step", "attempt"}, keys(entries[0].Context))
	require.Equal(t, map[string]any{"WorkflowID": "provision:n1", "RunID": "r1"}, entries[1].ContextMap(), "a child's fields leak into its parent")
	require.Equal(t, zapcore.WarnLevel, entries[1].Level)
	require.Empty(t, entries[2].Context)
	require.Equal(t, "plain", entries[2].Message)
}

func keys(fs []zapcore.Field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Key
	}
	return out
}
