package hostruns

import (
	"context"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/choria-temporal/provisioner/workflows"
)

// Decode is a run as visibility lists or describes it, its search attributes decoded.
func Decode(info *workflowpb.WorkflowExecutionInfo) Run {
	r := Run{
		WorkflowID: info.GetExecution().GetWorkflowId(),
		RunID:      info.GetExecution().GetRunId(),
		Type:       info.GetType().GetName(),
		TaskQueue:  info.GetTaskQueue(),
		Status:     info.GetStatus(),
		Identity:   Keyword(info, workflows.IdentityKey.GetName()),
		Site:       Keyword(info, workflows.SiteKey.GetName()),
		Step:       Keyword(info, workflows.StepKey.GetName()),
		Outcome:    Keyword(info, workflows.OutcomeKey.GetName()),
		Source:     Keyword(info, workflows.SourceKey.GetName()),
		Error:      Keyword(info, workflows.ErrorKey.GetName()),
		Issued:     Datetime(info, workflows.IssuedKey.GetName()),
		Expires:    Datetime(info, workflows.ExpiresKey.GetName()),
		Signer:     Keyword(info, workflows.SignerKey.GetName()),
	}
	if t := info.GetStartTime(); t != nil {
		r.Started = t.AsTime()
	}
	if t := info.GetCloseTime(); t != nil {
		r.Closed = t.AsTime()
	}
	return r
}

// Keyword reads a keyword search attribute of a run ("" when unset or not a string).
func Keyword(info *workflowpb.WorkflowExecutionInfo, name string) string {
	p, ok := info.GetSearchAttributes().GetIndexedFields()[name]
	if !ok {
		return ""
	}
	var v string
	if converter.GetDefaultDataConverter().FromPayload(p, &v) != nil {
		return ""
	}
	return v
}

// Datetime reads a datetime search attribute of a run (zero when unset or not a time).
func Datetime(info *workflowpb.WorkflowExecutionInfo, name string) time.Time {
	p, ok := info.GetSearchAttributes().GetIndexedFields()[name]
	if !ok {
		return time.Time{}
	}
	var v time.Time
	if converter.GetDefaultDataConverter().FromPayload(p, &v) != nil {
		return time.Time{}
	}
	return v
}

// Ours says whether a provisioner on taskQueue started the run: the workflow ID alone says
// nothing, any namespace client may start a workflow of any type under a host's ID.
func (r Run) Ours(taskQueue string) bool {
	return r.Type == workflows.WorkflowName && r.TaskQueue == taskQueue
}

// StatusName is the run's status as Temporal names it: Running, Completed, Failed, ...
func (r Run) StatusName() string {
	return strings.TrimPrefix(r.Status.String(), "WorkflowExecutionStatus")
}

// HostIdentity is the host the run is for: its identity attribute, or, for a run started before
// that was set, the one its workflow ID names.
func (r Run) HostIdentity() string {
	if r.Identity != "" {
		return r.Identity
	}
	id, _ := workflows.IdentityFromWorkflowID(r.WorkflowID)
	return id
}

// Running says whether the run is open.
func (r Run) Running() bool { return r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING }

// Page lists one page of the runs query selects, from token (nil: the first page); next is nil
// after the last page.
func Page(ctx context.Context, l Lister, query string, token []byte, size int) (runs []Run, next []byte, err error) {
	resp, err := l.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: int32(size)})
	if err != nil {
		return nil, nil, fmt.Errorf("listing host runs: %w", err)
	}
	runs = make([]Run, 0, len(resp.GetExecutions()))
	for _, info := range resp.GetExecutions() {
		runs = append(runs, Decode(info))
	}
	return runs, resp.GetNextPageToken(), nil
}

// Each calls fn with every run query selects, page by page, until fn returns false.
func Each(ctx context.Context, l Lister, query string, fn func(Run) bool) error {
	var token []byte
	for {
		runs, next, err := Page(ctx, l, query, token, PageSize)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if !fn(r) {
				return nil
			}
		}
		if token = next; len(token) == 0 {
			return nil
		}
	}
}

// LatestOf reads every run of the workflow IDs, whatever their type or task queue, and returns
// each ID's newest run (by start time: a workflow ID has one open run at most, started after
// all its others) and its number of runs; an ID with no run is absent. Its cost is one request
// per IDsPerQuery IDs and PageSize runs of theirs, whatever the size of the fleet.
func LatestOf(ctx context.Context, l Lister, ids []string) (map[string]Latest, error) {
	out := make(map[string]Latest, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), IDsPerQuery)
		query, err := IDsQuery(ids[:n])
		if err != nil {
			return nil, err
		}
		err = Each(ctx, l, query, func(r Run) bool {
			cur, seen := out[r.WorkflowID]
			if !seen || r.Started.After(cur.Run.Started) {
				cur.Run = r
			}
			cur.Runs++
			out[r.WorkflowID] = cur
			return true
		})
		if err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return out, nil
}
