package audit

import (
	"sort"

	"github.com/choria-temporal/provisioner/common/auditlog"
)

// MergeSink sets what the audit sink holds of each issuance Temporal lists, and adds the sink's
// issuances in the window whose runs Temporal no longer holds: the two records side by side, so
// that one missing from either is named.
func MergeSink(recs []Record, entries []auditlog.Entry, w Window) []Record {
	inSink := map[string]auditlog.Entry{}
	for _, e := range entries {
		if e.Kind != auditlog.KindIssued || e.RunID == "" {
			continue
		}
		if e.Time.Before(w.Since) || (!w.Until.IsZero() && e.Time.After(w.Until)) || (w.Identity != "" && e.Identity != w.Identity) {
			continue
		}
		inSink[e.RunID] = e
	}
	out := make([]Record, 0, len(recs)+len(inSink))
	for _, r := range recs {
		if _, ok := inSink[r.RunID]; ok {
			r.Sink = SinkRecorded
			delete(inSink, r.RunID)
		} else {
			r.Sink = SinkMissing
			if r.Note == "" {
				r.Note = "not in the audit sink"
			}
		}
		out = append(out, r)
	}
	for _, e := range inSink {
		out = append(out, Record{Identity: e.Identity, Site: e.Site, Issued: e.Time, Expires: e.Expires, Signer: e.Signer,
			WorkflowID: e.Workflow, RunID: e.RunID, Sink: SinkOnly, Note: "its run is no longer in Temporal"})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Issued.Before(out[j].Issued) })
	return out
}
