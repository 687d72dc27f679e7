package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// fakeVisibility is a visibility store: every run of the namespace in the store's order (open
// first, then the most recently closed), the query for candidates answered by candidate, and a
// `WorkflowId IN (...)` query by the IDs.
type fakeVisibility struct {
	fakeClient
	runs      []*workflowpb.WorkflowExecutionInfo
	candidate func(*workflowpb.WorkflowExecutionInfo) bool
	queries   []string
}

func (f *fakeVisibility) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.queries = append(f.queries, req.Query)
	sel := f.candidate
	if in, ok := strings.CutPrefix(req.Query, "WorkflowId IN ("); ok {
		ids := map[string]bool{}
		for _, id := range strings.Split(strings.TrimSuffix(in, ")"), ", ") {
			ids[strings.Trim(id, "'")] = true
		}
		sel = func(i *workflowpb.WorkflowExecutionInfo) bool { return ids[i.GetExecution().GetWorkflowId()] }
	}
	var match []*workflowpb.WorkflowExecutionInfo
	for _, r := range f.runs {
		if sel(r) {
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

func (f *fakeVisibility) GetWorkflowHistory(context.Context, string, string, bool, enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	return noHistory{}
}

type noHistory struct{}

func (noHistory) HasNext() bool                          { return false }
func (noHistory) Next() (*historypb.HistoryEvent, error) { return nil, nil }

// fleet builds runs in the store's order: each spec is "identity:status[:type[:queue]]", newest
// first.
func fleet(t *testing.T, specs ...string) []*workflowpb.WorkflowExecutionInfo {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var out []*workflowpb.WorkflowExecutionInfo
	for i, spec := range specs {
		p := append(strings.Split(spec, ":"), workflows.WorkflowName, "tq")
		status := map[string]enumspb.WorkflowExecutionStatus{"running": enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			"failed": enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, "completed": enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}[p[1]]
		sa, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"failed": workflows.OutcomeFailed, "completed": workflows.OutcomeProvisioned, "running": workflows.OutcomeRunning}[p[1]])
		require.NoError(t, err)
		out = append(out, &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: workflows.WorkflowID(p[0]), RunId: fmt.Sprintf("run-%d", i)},
			Type:      &commonpb.WorkflowType{Name: p[2]}, TaskQueue: p[3], Status: status,
			StartTime:        timestamppb.New(start.Add(-time.Duration(i) * time.Minute)),
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{workflows.OutcomeKey.GetName(): sa}},
		})
	}
	return out
}

// what `--outcome failed` selects: failed runs of ours
func failedOfOurs(i *workflowpb.WorkflowExecutionInfo) bool {
	return i.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_FAILED && hostruns.Decode(i).Ours("tq")
}

// A failed run is a failed host only when it is the host's latest run; a host whose latest run
// someone else started is not retried but reported.
func TestFailedHostsAreTheFailedLatestRuns(t *testing.T) {
	fv := &fakeVisibility{candidate: failedOfOurs, runs: fleet(t,
		"squatted:running:Squat:elsewhere", // newest: someone else's run under squatted's ID
		"again:completed",                  // again failed, then was provisioned
		"alone:failed",
		"again:failed",
		"squatted:failed",
		"alone:failed", // alone's earlier failure
		"fine:completed",
	)}
	o := &Operator{C: fv, TaskQueue: "tq", Starter: hostruns.Starter{TaskQueue: "tq"}}
	hosts, err := o.List(context.Background(), Filter{Outcome: workflows.OutcomeFailed})
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.Equal(t, "alone", hosts[0].Identity)
	require.Equal(t, "run-2", hosts[0].RunID)
	require.Equal(t, 2, hosts[0].Runs)
	require.Equal(t, []string{o.Query(Filter{Outcome: workflows.OutcomeFailed}),
		"WorkflowId IN ('provision:alone', 'provision:again', 'provision:squatted')"}, fv.queries,
		"one page of candidates, one query for their hosts' runs: nothing else is read")

	fv.queries = nil
	sum, err := o.Retries(context.Background(), RetryRequest{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []string{"alone"}, sum.Retried)
	require.Len(t, sum.Skipped, 1)
	require.Contains(t, sum.Skipped["squatted"], `workflow type "Squat" on task queue "elsewhere"`)
	require.Len(t, fv.queries, 2)
	require.Empty(t, fv.starts, "a dry run starts nothing")

	fv.status = enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
	sum, err = o.Retries(context.Background(), RetryRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"alone"}, sum.Retried)
	require.Len(t, fv.starts, 1)
	require.Equal(t, workflows.WorkflowID("alone"), fv.starts[0].ID)
}

// A listing's pages, each at most --limit hosts, put together are the whole listing; a token is
// refused with other filters.
func TestListingPages(t *testing.T) {
	var specs []string
	for i := range 7 {
		specs = append(specs, fmt.Sprintf("h%d:failed", i))
		if i%3 == 0 {
			specs = append(specs, fmt.Sprintf("h%d:failed", i)) // an older failure, read but not listed
		}
	}
	fv := &fakeVisibility{candidate: failedOfOurs, runs: fleet(t, specs...)}
	o := &Operator{C: fv, TaskQueue: "tq"}
	f := Filter{Outcome: workflows.OutcomeFailed}
	all, err := o.List(context.Background(), f)
	require.NoError(t, err)
	require.Len(t, all, 7)

	var paged []Host
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 7)
		l, err := o.ListPage(context.Background(), f, Page{Limit: 3, Token: token})
		require.NoError(t, err)
		require.LessOrEqual(t, len(l.Hosts), 3)
		paged = append(paged, l.Hosts...)
		if token = l.Next; token == "" {
			break
		}
	}
	require.Equal(t, all, paged)

	first, err := o.ListPage(context.Background(), f, Page{Limit: 3})
	require.NoError(t, err)
	_, err = o.ListPage(context.Background(), Filter{Outcome: workflows.OutcomeProvisioned}, Page{Token: first.Next})
	require.ErrorIs(t, err, ErrBadFilter)
	_, err = o.ListPage(context.Background(), f, Page{Token: "not a token"})
	require.ErrorIs(t, err, ErrBadFilter)
	_, err = o.List(context.Background(), Filter{Outcome: "broken"})
	require.ErrorIs(t, err, ErrBadFilter)
	_, err = o.ListPage(context.Background(), f, Page{Limit: -1})
	require.ErrorIs(t, err, ErrBadFilter)
}

// The cost of `--outcome failed` is a page a thousand candidates and a query a 500 of their
// hosts (and a page a thousand of those hosts' runs): 1,200 failed hosts cost 5 requests.
func TestListingCostGrowsWithTheAnswer(t *testing.T) {
	var specs []string
	for i := range 1200 {
		specs = append(specs, fmt.Sprintf("h%04d:failed", i))
	}
	for i := range 3000 {
		specs = append(specs, fmt.Sprintf("ok%04d:completed", i)) // never read
	}
	fv := &fakeVisibility{candidate: failedOfOurs, runs: fleet(t, specs...)}
	o := &Operator{C: fv, TaskQueue: "tq"}
	hosts, err := o.List(context.Background(), Filter{Outcome: workflows.OutcomeFailed})
	require.NoError(t, err)
	require.Len(t, hosts, 1200)
	require.Len(t, fv.queries, 5, "2 candidate pages, 2+1 queries of their hosts")
}

// The filters are the visibility query's, so that the store selects the candidates.
func TestQueries(t *testing.T) {
	o := &Operator{TaskQueue: "tq"}
	base := "WorkflowType = 'ProvisionHost' AND TaskQueue = 'tq'"
	require.Equal(t, base+" AND ProvisionStep = 'helper' AND "+failedStatuses, o.Query(Filter{Outcome: workflows.OutcomeFailed, Step: workflows.StepHelper}))
	require.Equal(t, base+" AND ProvisionOutcome = 'deferred' AND ExecutionStatus = 'Running'", o.Query(Filter{Outcome: workflows.OutcomeDeferred}))
	require.Equal(t, base+" AND ProvisionOutcome = 'provisioned' AND ProvisionSite = 'dc1'", o.Query(Filter{Outcome: workflows.OutcomeProvisioned, Site: "dc1"}))
	require.Equal(t, base, o.Query(Filter{Text: "web"}), "text is matched on the client: visibility has no substring match")
}

// Without filters every run of ours is a candidate: the listing reads them once (no query of
// their hosts' runs) and keeps each host's newest.
func TestListingEveryHostReadsEachRunOnce(t *testing.T) {
	fv := &fakeVisibility{candidate: func(i *workflowpb.WorkflowExecutionInfo) bool { return hostruns.Decode(i).Ours("tq") },
		runs: fleet(t, "a:running", "b:completed", "a:failed", "b:failed", "c:failed")}
	o := &Operator{C: fv, TaskQueue: "tq"}
	hosts, err := o.List(context.Background(), Filter{})
	require.NoError(t, err)
	require.Len(t, fv.queries, 1)
	got := map[string]string{}
	for _, h := range hosts {
		got[h.Identity] = fmt.Sprintf("%s/%d", h.Status, h.Runs)
	}
	require.Equal(t, map[string]string{"a": "Running/2", "b": "Completed/2", "c": "Failed/1"}, got)
}

// lateStarts is a Temporal that does not answer a host's first start in time, although it starts
// the run: the second start meets that run.
type lateStarts struct {
	*fakeVisibility
	tries map[string]int
}

func (l *lateStarts) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	l.tries[o.ID]++
	if l.tries[o.ID] == 1 {
		return nil, serviceerror.NewDeadlineExceeded("context deadline exceeded")
	}
	return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("started", "", "")
}

// A start Temporal answered late is tried again, and a run it started anyway counts as started.
func TestBulkRetryTriesALateStartAgain(t *testing.T) {
	l := &lateStarts{fakeVisibility: &fakeVisibility{candidate: failedOfOurs, runs: fleet(t, "a:failed")}, tries: map[string]int{}}
	o := &Operator{C: l, TaskQueue: "tq"}
	sum, err := o.Retries(context.Background(), RetryRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, sum.Retried)
	require.Empty(t, sum.Skipped)
	require.Equal(t, 2, l.tries[workflows.WorkflowID("a")])
}

// countingHistory counts the history reads of a listing.
type countingHistory struct {
	*fakeVisibility
	reads int
}

func (c *countingHistory) GetWorkflowHistory(ctx context.Context, id, run string, long bool, f enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	c.reads++
	return c.fakeVisibility.GetWorkflowHistory(ctx, id, run, long, f)
}

// A failed run that recorded its error type is listed with it and its step, without a history
// read; one that did not (an older run) is read; --full-reasons reads them all.
func TestFailedHostsReasonFromVisibility(t *testing.T) {
	runs := fleet(t, "typed:failed", "untyped:failed")
	for _, kv := range [][2]string{{workflows.ErrorKey.GetName(), "HelperError"}, {workflows.StepKey.GetName(), workflows.StepHelper}} {
		p, err := converter.GetDefaultDataConverter().ToPayload(kv[1])
		require.NoError(t, err)
		runs[0].SearchAttributes.IndexedFields[kv[0]] = p
	}
	c := &countingHistory{fakeVisibility: &fakeVisibility{candidate: failedOfOurs, runs: runs}}
	o := &Operator{C: c, TaskQueue: "tq", Starter: hostruns.Starter{TaskQueue: "tq"}}
	l, err := o.ListPage(context.Background(), Filter{Outcome: workflows.OutcomeFailed}, Page{})
	require.NoError(t, err)
	require.Len(t, l.Hosts, 2)
	require.Equal(t, "HelperError at helper (hosts show: why)", l.Hosts[0].Reason)
	require.Equal(t, 1, c.reads, "only the run without an error type is read")

	c.reads = 0
	_, err = o.ListPage(context.Background(), Filter{Outcome: workflows.OutcomeFailed}, Page{FullReasons: true})
	require.NoError(t, err)
	require.Equal(t, 2, c.reads)
}
