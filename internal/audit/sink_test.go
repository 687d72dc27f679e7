package audit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/common/auditlog"
)

// Each issuance is named by where it is: in both records, in Temporal only, in the sink only.
func TestMergeSinkNamesWhatIsInOneAndNotTheOther(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	recs := []Record{{Identity: "a", RunID: "r1", Issued: at}, {Identity: "b", RunID: "r2", Issued: at.Add(time.Minute)}}
	entries := []auditlog.Entry{
		{Kind: auditlog.KindIssued, Identity: "a", RunID: "r1", Time: at},
		{Kind: auditlog.KindIssued, Identity: "c", RunID: "r3", Time: at.Add(2 * time.Minute)},
		{Kind: auditlog.KindBanned, Identity: "c", Time: at.Add(3 * time.Minute)},
		{Kind: auditlog.KindIssued, Identity: "d", RunID: "r4", Time: at.Add(-time.Hour)}, // before the window
	}
	out := MergeSink(recs, entries, Window{Since: at.Add(-time.Minute)})
	require.Len(t, out, 3)
	require.Equal(t, SinkRecorded, out[0].Sink)
	require.Equal(t, SinkMissing, out[1].Sink)
	require.Equal(t, "c", out[2].Identity)
	require.Equal(t, SinkOnly, out[2].Sink)
}
