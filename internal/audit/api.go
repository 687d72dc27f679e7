// Package audit is the issuance log of the provisioner: every identity its runs issued in a
// window, read from Temporal alone (visibility for the identity record, one history read per
// issuance for the helper's decision), never from a database of its own. It prints no secret:
// the identity record is times and a key ID, and of the helper's answer only its decision, its
// message and its reply seal are read. The answer is read as the worker reads it (Converter):
// one the worker would have refused is reported as such, never printed as a decision.
package audit

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// Client is the part of the Temporal client the audit reads with (client.Client has it).
type Client interface {
	hostruns.Lister
	GetWorkflowHistory(ctx context.Context, workflowID, runID string, isLongPoll bool, filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator
}

// Reader reads the issuances of one task queue and site.
type Reader struct {
	C         Client
	TaskQueue string
	Site      string // "": every site of the task queue
	// DC decodes the helper's answer in history with the worker's rules (Converter): nil, no
	// history is read, and the records have no decision or message
	DC converter.DataConverter
}

// Window selects issuances: issued in [Since, Until) (Until zero: up to now), of Identity
// ("": of every host).
type Window struct {
	Since    time.Time
	Until    time.Time
	Identity string
}

// Record is one issuance: what a provisioned run issued its host, the helper's decision that led
// to it, and the run. Superseded identities are records too: the log is of issuances, not of
// what hosts hold now. JSON (one object a line) is what a SIEM reads.
type Record struct {
	Identity string    `json:"identity"`
	Site     string    `json:"site,omitempty"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
	Signer   string    `json:"signer"`
	// Source started the run: discovery, event, operator or renewal (workflows.Source*)
	Source string `json:"source"`
	// Decision and Message are the helper's (workflows.Decision*, its msg); empty when not read
	Decision   string `json:"decision,omitempty"`
	Message    string `json:"message,omitempty"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	// Note says why the decision is missing (the history could not be read or decoded, or
	// what was refused)
	Note string `json:"note,omitempty"`
	// Refused is set when the run's history holds a helper answer the worker would not have
	// taken: RefusedPayload or RefusedReply. The run's identity is listed, its decision is not.
	Refused string `json:"refused,omitempty"`
	// Sink says what the audit sink holds of the issuance, when one is configured: SinkRecorded,
	// SinkMissing (in Temporal, not in the sink) or SinkOnly (in the sink, its run gone)
	Sink string `json:"sink,omitempty"`
}

// What the audit sink holds of an issuance (Record.Sink).
const (
	SinkRecorded = "recorded" // in both
	SinkMissing  = "missing"  // a run Temporal holds with no entry in the sink: issued with no sink, or not by a worker of this sink
	SinkOnly     = "only"     // an entry whose run Temporal no longer holds (retention, deletion)
)

// Why an issuance's helper answer is refused (Record.Refused).
const (
	// RefusedPayload: a payload of the answer (or of a local activity marker) is not encrypted
	// under the codec key for the host's workflow: plaintext, another key, another workflow's,
	// or altered
	RefusedPayload = "payload"
	// RefusedReply: the answer is sealed as the reply to another run's request, or to another
	// step's (activities.Seal)
	RefusedReply = "reply"
)

// Answer is the part of the helper's answer (activities.HelperOutput) the audit reads:
// its decision and message, never its configuration, key or claims, which stay undecoded.
type Answer struct {
	Defer    bool   `json:"defer"`
	Shutdown bool   `json:"shutdown"`
	Msg      string `json:"msg"`
	// Reply is the seal of the request the answer was sent for (zero in histories written
	// before replies were sealed)
	Reply activities.Seal `json:"reply"`
}

// RefusedError is a helper answer the audit does not take as its run's (Record.Refused).
type RefusedError struct {
	Reason string // RefusedPayload, RefusedReply
	Detail string
}

func (e *RefusedError) Error() string {
	return "the helper's answer is refused: " + e.Detail
}

// HistoryReads bounds the history reads in flight: each is one small run's history.
const HistoryReads = 16
