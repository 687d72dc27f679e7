// Package hostruns is the client's side of the host runs' contract (package workflows holds the
// workflow's side, and no client code): how a run is started (start.go), the visibility queries
// that select runs (query.go), and the one way the provisioner reads them back (hostruns.go: the
// paged listing, the decoding of a run's search attributes, whether a run is ours, which run of a
// host is its latest; identities.go: the identities hosts hold). Discovery, renewal, the operator
// CLI, the audit and preflight start and list through it.
package hostruns

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
)

// Lister is the part of the Temporal client a listing needs (client.Client has it).
type Lister interface {
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// Run is one run of a host's workflow as visibility describes it.
type Run struct {
	WorkflowID string
	RunID      string
	Type       string // workflow type
	TaskQueue  string
	Status     enumspb.WorkflowExecutionStatus
	Started    time.Time
	Closed     time.Time // zero while open

	// the provisioner's search attributes ("" when unset)
	Identity string
	Site     string
	Step     string
	Outcome  string
	Source   string // how the run's sighting was made (workflows.Source*)
	Error    string // the error type a failed run failed with (workflows.ErrorKey)

	// the identity a provisioned run issued (workflows.IdentityRecord; zero when none)
	Issued  time.Time
	Expires time.Time
	Signer  string
}

// Latest is what visibility holds of one workflow ID: its newest run, of whatever type or task
// queue, and how many runs it has.
type Latest struct {
	Run  Run
	Runs int
}

// PageSize is the runs per page a listing asks for (the visibility store's usual maximum).
const PageSize = 1000

// IDsPerQuery bounds the workflow IDs of one `WorkflowId IN (...)` query: a 500-ID query is
// about 20 KiB.
const IDsPerQuery = 500
