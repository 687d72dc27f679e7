package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/choria-temporal/provisioner/common/textsafe"
)

// WriteJSON writes the records as JSON lines, one issuance an object, for a SIEM.
func WriteJSON(w io.Writer, recs []Record) error {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("writing the audit: %w", err)
		}
	}
	return nil
}

// WriteTable writes the records as a table for a terminal, with the number of issuances last:
// text of the hosts' or the helper's making without control characters, the message cut short.
// An issuance whose helper answer was refused reads REFUSED:<why> where its decision would be.
func WriteTable(w io.Writer, recs []Record) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ISSUED\tIDENTITY\tEXPIRES\tSIGNER\tSOURCE\tDECISION\tMESSAGE\tWORKFLOW\tRUN")
	for _, r := range recs {
		msg := r.Message
		if r.Note != "" {
			msg = "(" + r.Note + ")"
		}
		decision := clean(r.Decision)
		if r.Refused != "" {
			decision = "REFUSED:" + clean(r.Refused)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", stamp(r.Issued), clean(r.Identity), stamp(r.Expires), clean(r.Signer),
			clean(r.Source), decision, textsafe.Clean(msg, 80), clean(r.WorkflowID), r.RunID)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the audit: %w", err)
	}
	_, err := fmt.Fprintf(w, "%d issuances\n", len(recs))
	return err
}

func clean(s string) string {
	if s == "" {
		return "-"
	}
	return textsafe.Clean(s, 300)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
