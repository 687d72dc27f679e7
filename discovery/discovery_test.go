package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choria-io/go-choria/lifecycle"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/choria-temporal/provisioner/internal/metrics"
	"github.com/choria-temporal/provisioner/workflows"
)

func startupEvent(t testing.TB, identity, component string) []byte {
	t.Helper()
	ev, err := lifecycle.New(lifecycle.Startup, lifecycle.Identity(identity), lifecycle.Component(component), lifecycle.Version("0.30.2"))
	require.NoError(t, err)
	j, err := json.Marshal(ev)
	require.NoError(t, err)
	return j
}

func TestParseStartupEvent(t *testing.T) {
	id, err := ParseStartupEvent(startupEvent(t, "n1.example", "provision_mode_server"), "provision_mode_server")
	require.NoError(t, err)
	require.Equal(t, "n1.example", id)
}

func TestHostileEventsAreRejected(t *testing.T) {
	shutdown, err := lifecycle.New(lifecycle.Shutdown, lifecycle.Identity("n1"), lifecycle.Component("provision_mode_server"))
	require.NoError(t, err)
	shutdownJSON, _ := json.Marshal(shutdown)
	cases := map[string][]byte{
		"not json":        []byte("not json at all"),
		"empty":           {},
		"wrong type":      shutdownJSON,
		"wrong component": startupEvent(t, "n1", "server"),
		"empty identity":  startupEvent(t, "", "provision_mode_server"),
		"10kB identity":   startupEvent(t, strings.Repeat("a", 10<<10), "provision_mode_server"),
		"control chars":   startupEvent(t, "n1\x07\x1b[2J", "provision_mode_server"),
		"wildcard":        startupEvent(t, "n1.*", "provision_mode_server"),
		"full wildcard":   startupEvent(t, ">", "provision_mode_server"),
		"space":           startupEvent(t, "n1 n2", "provision_mode_server"),
		"huge":            append([]byte(`{"protocol":"io.choria.lifecycle.v1.startup","identity":"`), append([]byte(strings.Repeat("x", 1<<20)), []byte(`"}`)...)...),
		"json array":      []byte(`[1,2,3]`),
	}
	for name, data := range cases {
		_, err := ParseStartupEvent(data, "provision_mode_server")
		require.ErrorIs(t, err, ErrBadEvent, name)
	}
}

func FuzzParseStartupEvent(f *testing.F) {
	f.Add(startupEvent(f, "n1.example", "provision_mode_server"))
	f.Add([]byte(`{"protocol":"io.choria.lifecycle.v1.startup","identity":"x","component":"provision_mode_server"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := ParseStartupEvent(data, "provision_mode_server")
		if err == nil {
			require.NoError(t, workflows.ValidateIdentity(id))
		} else {
			require.ErrorIs(t, err, ErrBadEvent)
		}
	})
}

type recordingStarter struct {
	mu        sync.Mutex
	calls     []client.StartWorkflowOptions
	args      []workflows.ProvisionInput
	err       error
	described int
	latest    *workflowpb.WorkflowExecutionInfo // the host's latest run; nil: none
	pending   int                               // activities pending in it
	result    *workflows.ProvisionResult        // its result; nil: cannot be read
	results   int                               // results read
	// closeAfter: after this many descriptions, the run is closed (latest becomes closed)
	closeAfter int
	closed     *workflowpb.WorkflowExecutionInfo
	// open is what a listing of the open runs returns, page by page; listErr fails it
	open    []*workflowpb.WorkflowExecutionInfo
	listErr error
	lists   []*workflowservice.ListWorkflowExecutionsRequest
}

func (r *recordingStarter) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists = append(r.lists, req)
	if r.listErr != nil {
		return nil, r.listErr
	}
	from := 0
	if len(req.NextPageToken) > 0 {
		fmt.Sscan(string(req.NextPageToken), &from)
	}
	to := min(from+int(req.PageSize), len(r.open))
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: r.open[from:to]}
	if to < len(r.open) {
		resp.NextPageToken = []byte(fmt.Sprint(to))
	}
	return resp, nil
}

func (r *recordingStarter) DescribeWorkflowExecution(ctx context.Context, id, run string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.described++
	if r.closed != nil && r.described > r.closeAfter {
		r.latest, r.pending = r.closed, 0
	}
	if r.latest == nil {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	resp := &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: r.latest}
	for i := 0; i < r.pending; i++ {
		resp.PendingActivities = append(resp.PendingActivities, &workflowpb.PendingActivityInfo{ActivityId: fmt.Sprint(i)})
	}
	return resp, nil
}

func (r *recordingStarter) GetWorkflow(ctx context.Context, id, run string) client.WorkflowRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results++
	return resultRun{r.result}
}

func (r *recordingStarter) started() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// resultRun is a closed run whose result is res (nil: the read fails).
type resultRun struct{ res *workflows.ProvisionResult }

func (resultRun) GetID() string                  { return "" }
func (resultRun) GetRunID() string               { return "" }
func (resultRun) GetFirstExecutionRunID() string { return "" }
func (r resultRun) Get(ctx context.Context, v any) error {
	if r.res == nil {
		return errors.New("history unavailable")
	}
	*(v.(*workflows.ProvisionResult)) = *r.res
	return nil
}
func (r resultRun) GetWithOptions(ctx context.Context, v any, _ client.WorkflowRunGetOptions) error {
	return r.Get(ctx, v)
}

func (r *recordingStarter) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, opts)
	r.args = append(r.args, args[0].(workflows.ProvisionInput))
	return nil, r.err
}

func newTestDiscoverer(t *testing.T, s Starter) (*Discoverer, *metrics.Metrics) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	d := New(nil, s, Options{Interval: time.Minute, Component: "provision_mode_server",
		Start: workflows.Starter{TaskQueue: "tq", Site: "lab"}}, m, zap.NewNop())
	return d, m
}

func TestEventBecomesSignalWithStart(t *testing.T) {
	s := &recordingStarter{}
	d, m := newTestDiscoverer(t, s)
	d.HandleEvent(context.Background(), startupEvent(t, "n1.example", "provision_mode_server"))
	d.HandleEvent(context.Background(), []byte("garbage"))
	require.Len(t, s.calls, 1)
	require.Equal(t, workflows.WorkflowID("n1.example"), s.calls[0].ID)
	require.Equal(t, "tq", s.calls[0].TaskQueue)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, s.calls[0].WorkflowIDReusePolicy)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING, s.calls[0].WorkflowIDConflictPolicy, "an open run is left alone")
	require.Equal(t, "n1.example", s.args[0].Identity)
	require.Equal(t, workflows.SourceEvent, s.args[0].Source)
	require.Equal(t, workflows.Summary("n1.example", "lab", workflows.SourceEvent), s.calls[0].StaticSummary)
	require.Equal(t, 1.0, testutil.ToFloat64(m.EventDiscovered.WithLabelValues("lab")))
}

// Only a startup event that arrived alone starts eagerly in this process; one with events
// queued behind it, and a sweep's sightings, start through the task queue.
func TestEagerStartOnlyForALoneEvent(t *testing.T) {
	s := &recordingStarter{}
	d, _ := newTestDiscoverer(t, s)
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceEvent, time.Now()))
	d.queued.Store(3)
	require.NoError(t, d.Sighted(context.Background(), "n2", workflows.SourceEvent, time.Now()))
	d.queued.Store(0)
	require.NoError(t, d.Sighted(context.Background(), "n3", workflows.SourceDiscovery, time.Now()))
	require.Len(t, s.calls, 3)
	require.True(t, s.calls[0].EnableEagerStart)
	require.False(t, s.calls[1].EnableEagerStart, "events were waiting")
	require.False(t, s.calls[2].EnableEagerStart, "a sweep")
}

// A fast-mode run gets a workflow task timeout its one task of local activities can keep under
// load; a regular run keeps Temporal's default.
func TestFastModeRunsGetALongerTaskTimeout(t *testing.T) {
	s := &recordingStarter{}
	d, _ := newTestDiscoverer(t, s)
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceEvent, time.Now()))
	d.opts.Start.Fast = true
	require.NoError(t, d.Sighted(context.Background(), "n2", workflows.SourceEvent, time.Now()))
	require.Len(t, s.calls, 2)
	require.Zero(t, s.calls[0].WorkflowTaskTimeout)
	require.Equal(t, workflows.FastModeTaskTimeout, s.calls[1].WorkflowTaskTimeout)
}

func TestLateSweepSightingOfAHostProvisionedSinceIsDropped(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	completed := func(at time.Time) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, CloseTime: timestamppb.New(at)}
	}
	cases := []struct {
		name      string
		seenAt    time.Time
		source    string
		latest    *workflowpb.WorkflowExecutionInfo
		started   int
		described int
	}{
		{"late, provisioned since", now.Add(-10 * time.Second), workflows.SourceDiscovery, completed(now.Add(-5 * time.Second)), 0, 1},
		{"late, provisioned before the sweep", now.Add(-10 * time.Second), workflows.SourceDiscovery, completed(now.Add(-20 * time.Second)), 1, 1},
		{"late, failed since", now.Add(-10 * time.Second), workflows.SourceDiscovery,
			&workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, CloseTime: timestamppb.New(now.Add(-5 * time.Second))}, 1, 1},
		{"late, never seen before", now.Add(-10 * time.Second), workflows.SourceDiscovery, nil, 1, 1},
		{"sweep sighting of a running host: nothing to do", now.Add(-10 * time.Second), workflows.SourceDiscovery,
			&workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}, 0, 1},
		{"late startup event of a running host: signalled", now.Add(-10 * time.Second), workflows.SourceEvent,
			&workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}, 1, 1},
		{"provisioned a moment after the sweep began", now.Add(-2 * time.Second), workflows.SourceDiscovery, completed(now.Add(-time.Second)), 0, 1},
		{"prompt startup event: no check", now.Add(-100 * time.Millisecond), workflows.SourceEvent, completed(now.Add(-5 * time.Second)), 1, 0},
		{"startup event that waited, provisioned since", now.Add(-10 * time.Second), workflows.SourceEvent, completed(now.Add(-5 * time.Second)), 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &recordingStarter{latest: c.latest}
			d, m := newTestDiscoverer(t, s)
			d.now = func() time.Time { return now }
			require.NoError(t, d.Sighted(context.Background(), "n1", c.source, c.seenAt))
			require.Len(t, s.calls, c.started)
			require.Equal(t, c.described, s.described)
			stale := 0.0
			if c.started == 0 && c.latest.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				stale = 1
			}
			require.Equal(t, stale, testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))
		})
	}
}

func TestStartFailureIsReturned(t *testing.T) {
	s := &recordingStarter{err: errors.New("temporal unavailable")}
	d, _ := newTestDiscoverer(t, s)
	require.ErrorContains(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, time.Now()), "temporal unavailable")
}

func searchAttrs(t *testing.T, kv map[string]string) *commonpb.SearchAttributes {
	t.Helper()
	sa := &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{}}
	for k, v := range kv {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		require.NoError(t, err)
		sa.IndexedFields[k] = p
	}
	return sa
}

// Staleness is judged by when the host's latest run restarted it (its result), not when the run
// closed: a run a stopped provisioner left in its restart grace closes only when a provisioner
// comes back, after that provisioner's first sweep began.
func TestStalenessByRestartTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	sweep := now.Add(-time.Second) // the sweep began a second ago; the run closed just now
	closedNow := &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, CloseTime: timestamppb.New(now),
		Execution: &commonpb.WorkflowExecution{WorkflowId: "provision:n1", RunId: "r1"}}
	restarted := func(at time.Time) *workflows.ProvisionResult {
		return &workflows.ProvisionResult{Outcome: workflows.OutcomeProvisioned, RestartedAt: at, RestartSplay: 1}
	}
	cases := []struct {
		name    string
		result  *workflows.ProvisionResult
		started int
	}{
		// restarted 2 minutes ago; the provisioner was down, the run closed when it came back:
		// the host answering now is back in provisioning mode
		{"restarted long before the sweep, closed late", restarted(now.Add(-2 * time.Minute)), 1},
		// restarted 2 s before the sweep: the server re-executes up to splay+2 s later, so
		// its reply to the sweep may predate its restart
		{"restarted just before the sweep", restarted(sweep.Add(-2 * time.Second)), 0},
		{"restarted after the sweep began", restarted(sweep.Add(100 * time.Millisecond)), 0},
		{"a run that restarted nothing (or of an older version)", &workflows.ProvisionResult{Outcome: workflows.OutcomeProvisioned}, 0},
		{"result unreadable: by the close time", nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &recordingStarter{latest: closedNow, result: c.result}
			d, m := newTestDiscoverer(t, s)
			d.now = func() time.Time { return now }
			require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, sweep))
			require.Equal(t, c.started, s.started())
			require.Equal(t, 1, s.results)
			require.Equal(t, float64(1-c.started), testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))
		})
	}

	// a run closed before the sweep began needs no result read
	s := &recordingStarter{latest: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		CloseTime: timestamppb.New(sweep.Add(-time.Minute))}}
	d, _ := newTestDiscoverer(t, s)
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, sweep))
	require.Equal(t, 1, s.started())
	require.Zero(t, s.results)

	// a run that closed at its restart RPC a moment before the sweep began: the server was still
	// waiting out its splay when it answered
	closedAtRestart := sweep.Add(-300 * time.Millisecond)
	s = &recordingStarter{latest: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		CloseTime: timestamppb.New(closedAtRestart), Execution: &commonpb.WorkflowExecution{WorkflowId: "provision:n1", RunId: "r2"}},
		result: restarted(closedAtRestart)}
	d, m := newTestDiscoverer(t, s)
	d.now = func() time.Time { return now }
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, sweep))
	require.Zero(t, s.started(), "an echo of the restart window started a second run")
	require.Equal(t, 1, s.results)
	require.Equal(t, 1.0, testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))
}

// A sweep sighting of a run past its restart RPC (no activity pending, step helper or restart) is
// judged once that run closes, instead of being absorbed by a run that will not serve it.
func TestSightingOfAFinishingRunWaitsForItsEnd(t *testing.T) {
	now := time.Now()
	running := func(step, outcome string) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			SearchAttributes: searchAttrs(t, map[string]string{workflows.StepKey.GetName(): step, workflows.OutcomeKey.GetName(): outcome})}
	}
	closed := &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, CloseTime: timestamppb.New(now.Add(time.Second)),
		Execution: &commonpb.WorkflowExecution{RunId: "r1"}}

	// in its grace after a restart two minutes ago; closes after the third look: started then
	s := &recordingStarter{latest: running(workflows.StepHelper, workflows.OutcomeRunning), closed: closed, closeAfter: 3,
		result: &workflows.ProvisionResult{RestartedAt: now.Add(-2 * time.Minute), RestartSplay: 1}}
	d, m := newTestDiscoverer(t, s)
	d.recheck = 10 * time.Millisecond
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now))
	require.Eventually(t, func() bool { return s.started() == 1 }, 2*time.Second, 5*time.Millisecond)
	require.Zero(t, testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))

	// the same, restarted just now: a late echo of the server it restarted, dropped
	s = &recordingStarter{latest: running(workflows.StepHelper, workflows.OutcomeRunning), closed: closed, closeAfter: 2,
		result: &workflows.ProvisionResult{RestartedAt: now.Add(-time.Second), RestartSplay: 1}}
	d, m = newTestDiscoverer(t, s)
	d.recheck = 10 * time.Millisecond
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now))
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")) == 1 }, 2*time.Second, 5*time.Millisecond)
	require.Zero(t, s.started())

	// left by a provisioner that stopped with the run's last task in hand: closed only when the
	// task timed out (10 s) and the next provisioner ran it; the sighting still starts the host
	looks := int((10*time.Second + time.Second) / FinishingRecheck)
	s = &recordingStarter{latest: running(workflows.StepRestart, workflows.OutcomeRunning), closed: closed, closeAfter: looks,
		result: &workflows.ProvisionResult{RestartedAt: now.Add(-time.Minute), RestartSplay: 1}}
	d, m = newTestDiscoverer(t, s)
	d.recheck = time.Millisecond
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now))
	require.Eventually(t, func() bool { return s.started() == 1 }, 5*time.Second, 5*time.Millisecond,
		"gave up on the run before its task timed out")
	require.Zero(t, testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))

	// open runs that will serve the sighting: nothing to do, no waiting
	for name, c := range map[string]struct {
		info    *workflowpb.WorkflowExecutionInfo
		pending int
	}{
		"an activity pending":     {running(workflows.StepHelper, workflows.OutcomeRunning), 1},
		"deferred":                {running(workflows.StepDeferred, workflows.OutcomeDeferred), 0},
		"before its helper":       {&workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}, 0},
		"between steps (old run)": {running(workflows.StepConfigure, workflows.OutcomeRunning), 0},
	} {
		s := &recordingStarter{latest: c.info, pending: c.pending}
		d, _ := newTestDiscoverer(t, s)
		d.recheck = 10 * time.Millisecond
		require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now), name)
		time.Sleep(50 * time.Millisecond)
		require.Zero(t, s.started(), name)
		require.Equal(t, 1, s.described, name)
	}
}

// A sweep judges the sightings of hosts at work by one listing of the open runs instead of a
// describe each; a run that may be finishing is still described, and a failed listing leaves
// every sighting to a describe of its own.
func TestSweepJudgesHostsAtWorkByOneListing(t *testing.T) {
	run := func(identity string, status enumspb.WorkflowExecutionStatus, attrs map[string]string) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: status, SearchAttributes: searchAttrs(t, attrs),
			Execution: &commonpb.WorkflowExecution{WorkflowId: workflows.WorkflowID(identity), RunId: "r-" + identity}}
	}
	step, outcome := workflows.StepKey.GetName(), workflows.OutcomeKey.GetName()
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	var open []*workflowpb.WorkflowExecutionInfo
	for i := range 2500 { // three pages
		open = append(open, run(fmt.Sprintf("queued%d", i), running, map[string]string{outcome: workflows.OutcomeRunning}))
	}
	open = append(open,
		run("reading", running, map[string]string{step: workflows.StepInventory}),
		run("deferred", running, map[string]string{step: workflows.StepDeferred, outcome: workflows.OutcomeDeferred}),
		run("helper", running, map[string]string{step: workflows.StepHelper}),
		run("restart", running, map[string]string{step: workflows.StepRestart}),
		run("closed", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, nil))

	s := &recordingStarter{open: open}
	ids, err := AbsorbingRuns(context.Background(), s)
	require.NoError(t, err)
	require.Len(t, s.lists, 3)
	require.Equal(t, "WorkflowType = 'ProvisionHost' AND ExecutionStatus = 'Running'", s.lists[0].Query)
	require.Len(t, ids, 2502)
	for _, id := range []string{"queued0", "queued2499", "reading", "deferred"} {
		require.Contains(t, ids, workflows.WorkflowID(id))
	}
	for _, id := range []string{"helper", "restart", "closed"} {
		require.NotContains(t, ids, workflows.WorkflowID(id), "may be finishing, or not open: described")
	}

	// the handover: a host at work is absorbed without a describe; one at its helper is
	// described (running, an activity pending: absorbed by that run); one unknown is started
	s = &recordingStarter{open: open, pending: 1}
	d, _ := newTestDiscoverer(t, s)
	o := d.listOpen(context.Background())
	sweptAt := time.Now()
	deadline := sweptAt.Add(time.Minute)
	for _, c := range []struct {
		identity          string
		latest            *workflowpb.WorkflowExecutionInfo // what a describe says
		result            handoverResult
		described, starts int
	}{
		{"queued7", nil, resultAbsorbed, 0, 0},
		{"deferred", nil, resultAbsorbed, 0, 0},
		{"helper", open[len(open)-3], resultJudged, 1, 0},
		{"new-host", nil, resultHanded, 2, 1},
	} {
		s.mu.Lock()
		s.latest = c.latest
		s.mu.Unlock()
		require.Equal(t, c.result, d.handOver(context.Background(), c.identity, sweptAt, deadline, o), c.identity)
		require.Equal(t, c.described, s.described, c.identity)
		require.Equal(t, c.starts, s.started(), c.identity)
	}

	// the listing fails: every sighting is described, as before
	s = &recordingStarter{open: open, listErr: serviceerror.NewUnavailable("visibility store down")}
	_, err = AbsorbingRuns(context.Background(), s)
	require.ErrorContains(t, err, "visibility store down")
	d, _ = newTestDiscoverer(t, s)
	o = d.listOpen(context.Background())
	require.Equal(t, resultHanded, d.handOver(context.Background(), "queued7", sweptAt, deadline, o))
	require.Equal(t, 1, s.described)
}
