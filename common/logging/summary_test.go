package logging

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A flood of one reason is one line at its start and one with the count at the interval's end;
// each reason has its own.
func TestSummaryLogsOncePerReasonAndInterval(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	s := NewSummary(zap.New(core), "payload refused", 50*time.Millisecond)
	for range 1000 {
		s.Warn("plaintext", zap.String(FieldWorkflowID, "x"))
	}
	s.Warn("foreign_binding")
	require.Equal(t, 2, logs.FilterMessage("payload refused").Len(), "the first of each reason")
	require.Eventually(t, func() bool { return logs.FilterMessage("payload refused (more, summarised)").Len() == 1 },
		5*time.Second, 10*time.Millisecond)
	line := logs.FilterMessage("payload refused (more, summarised)").All()[0].ContextMap()
	require.Equal(t, "plaintext", line[FieldReason])
	require.EqualValues(t, 999, line[FieldCount])

	// the next interval starts afresh
	s.Warn("plaintext")
	require.Equal(t, 3, logs.FilterMessage("payload refused").Len())
}
