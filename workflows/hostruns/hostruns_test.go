package hostruns

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/choria-temporal/provisioner/workflows"
)

// byIDs answers `WorkflowId IN (...)` queries from runs, pageSize at a time.
type byIDs struct {
	runs    []*workflowpb.WorkflowExecutionInfo
	queries []string
}

func (b *byIDs) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	b.queries = append(b.queries, req.Query)
	var match []*workflowpb.WorkflowExecutionInfo
	for _, r := range b.runs {
		if strings.Contains(req.Query, "'"+r.GetExecution().GetWorkflowId()+"'") {
			match = append(match, r)
		}
	}
	from := 0
	fmt.Sscan(string(req.NextPageToken), &from)
	to := min(from+int(req.PageSize), len(match))
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: match[from:to]}
	if to < len(match) {
		resp.NextPageToken = []byte(fmt.Sprint(to))
	}
	return resp, nil
}

func info(id, run string, started time.Time, typ, queue string) *workflowpb.WorkflowExecutionInfo {
	return &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: run},
		Type: &commonpb.WorkflowType{Name: typ}, TaskQueue: queue, StartTime: timestamppb.New(started),
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}
}

// A host's latest run is its newest, whoever started it, found among every run of its workflow
// ID, IDsPerQuery IDs a query.
func TestLatestOfReadsTheRunsOfTheIDsOnly(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	b := &byIDs{}
	var ids []string
	for i := range IDsPerQuery + 10 {
		id := fmt.Sprintf("provision:h%d", i)
		ids = append(ids, id)
		b.runs = append(b.runs, info(id, "old", t0, workflows.WorkflowName, "tq"), info(id, "new", t0.Add(time.Minute), workflows.WorkflowName, "tq"))
	}
	b.runs = append(b.runs, info("provision:h0", "squat", t0.Add(time.Hour), "Squat", "tq"), info("provision:other", "x", t0, workflows.WorkflowName, "tq"))
	latest, err := LatestOf(context.Background(), b, ids)
	require.NoError(t, err)
	require.Len(t, latest, IDsPerQuery+10)
	require.NotContains(t, latest, "provision:other")
	require.Equal(t, "squat", latest["provision:h0"].Run.RunID)
	require.False(t, latest["provision:h0"].Run.Ours("tq"))
	require.Equal(t, 3, latest["provision:h0"].Runs)
	require.Equal(t, "new", latest["provision:h1"].Run.RunID)
	require.True(t, latest["provision:h1"].Run.Ours("tq"))
	require.False(t, latest["provision:h1"].Run.Ours("other-queue"))
	require.Len(t, b.queries, 3, "two pages of the first 500 IDs' runs, one of the last 10's")

	_, err = LatestOf(context.Background(), b, []string{"provision:it's"})
	require.ErrorContains(t, err, "cannot be quoted")
}

func TestDecode(t *testing.T) {
	p, err := converter.GetDefaultDataConverter().ToPayload("dc1")
	require.NoError(t, err)
	i := info("provision:n1", "r1", time.Unix(1, 0), workflows.WorkflowName, "tq")
	i.SearchAttributes = &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{workflows.SiteKey.GetName(): p}}
	r := Decode(i)
	require.Equal(t, Run{WorkflowID: "provision:n1", RunID: "r1", Type: workflows.WorkflowName, TaskQueue: "tq",
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, Started: time.Unix(1, 0).UTC(), Site: "dc1"}, r)
	require.False(t, r.Running())
}
