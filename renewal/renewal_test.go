package renewal

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/reprovision"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// testQueue is the task queue the test environment runs workflows and activities on.
const testQueue = "default-test-taskqueue"

// fakeTemporal records the runs the Renew activity starts; the rest of client.Client is unused.
type fakeTemporal struct {
	client.Client
	mu      sync.Mutex
	started []client.StartWorkflowOptions
	inputs  []workflows.ProvisionInput
	failAll bool
	open    map[string]bool // workflow IDs with an open run
}

// DescribeWorkflowExecution says a host's workflow has an open run when open names it; else it
// has none left (retention deleted them).
func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.open[id] {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "open-run"}, Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}}, nil
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, name any, args ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAll || name != workflows.WorkflowName {
		return nil, errors.New("frontend unavailable")
	}
	f.started = append(f.started, o)
	f.inputs = append(f.inputs, args[0].(workflows.ProvisionInput))
	return fakeRun{id: o.ID}, nil
}

func (f *fakeTemporal) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{}, nil
}

type fakeRun struct {
	client.WorkflowRun
	id string
}

func (r fakeRun) GetID() string { return r.id }

// fleet answers reprovision from a script: identity -> error (nil: accepted), and counts asks.
type fleet struct {
	mu      sync.Mutex
	replies map[string]error
	asked   map[string]int
}

func (f *fleet) reprovision(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[id]++
	return f.replies[id]
}

type harness struct {
	testsuite.WorkflowTestSuite
	env      *testsuite.TestWorkflowEnvironment
	temporal *fakeTemporal
	fleet    *fleet
	renewals *prometheus.CounterVec
	found    FindResult
}

func newHarness(t *testing.T, p Policy, found FindResult, replies map[string]error) *harness {
	h := &harness{temporal: &fakeTemporal{}, fleet: &fleet{replies: replies, asked: map[string]int{}}, found: found,
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "choria_provisioner_renewals_total"}, []string{"site", "outcome"})}
	h.env = h.NewTestWorkflowEnvironment()
	a := NewActivities(Deps{Temporal: h.temporal, Starter: hostruns.Starter{TaskQueue: testQueue, Site: "lab"}, Renewals: h.renewals, Log: zap.NewNop()})
	a.reprovision = h.fleet.reprovision
	Workflow{Policy: p}.Register(h.env)
	a.Register(h.env)
	// visibility is the integration tests' business: the listing is scripted here
	h.env.OnActivity(FindExpiringName, mockAny, mockAny).Return(func(_ context.Context, in FindInput) (*FindResult, error) {
		require.Equal(t, p.Limit, in.Limit)
		r := h.found
		return &r, nil
	})
	return h
}

func (h *harness) run(t *testing.T) *Result {
	t.Helper()
	h.env.ExecuteWorkflow(WorkflowName)
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	var r Result
	require.NoError(t, h.env.GetWorkflowResult(&r))
	return &r
}

var on = Policy{Enabled: true, RenewBefore: 30 * 24 * time.Hour, Rate: 60, Limit: 10}

// Renewal off in the worker's configuration: the run renews nothing, lists nothing.
func TestDisabledRenewsNothing(t *testing.T) {
	p := on
	p.Enabled = false
	h := newHarness(t, p, FindResult{Found: 1, Hosts: []Expiring{{Identity: "a.example"}}}, nil)
	r := h.run(t)
	require.Contains(t, r.Skipped, "disabled")
	require.Empty(t, h.fleet.asked)
}

// Outside its window a run renews nothing; the window is UTC and may wrap midnight.
func TestWindow(t *testing.T) {
	at := func(hm string) time.Time {
		tm, err := time.Parse("15:04", hm)
		require.NoError(t, err)
		return tm
	}
	night := Policy{WindowStart: 22 * 60, WindowEnd: 4 * 60}
	require.True(t, night.InWindow(at("23:10")))
	require.True(t, night.InWindow(at("03:59")))
	require.False(t, night.InWindow(at("04:00")))
	require.False(t, night.InWindow(at("12:00")))
	day := Policy{WindowStart: 9 * 60, WindowEnd: 17 * 60}
	require.True(t, day.InWindow(at("09:00")))
	require.False(t, day.InWindow(at("17:00")))
	require.True(t, Policy{}.InWindow(at("12:00")), "no window: any time")

	p := on
	now := time.Now().UTC()
	p.WindowStart, p.WindowEnd = (now.Hour()*60+now.Minute()+120)%1440, (now.Hour()*60+now.Minute()+180)%1440
	h := newHarness(t, p, FindResult{Found: 1, Hosts: []Expiring{{Identity: "a.example"}}}, nil)
	h.env.SetStartTime(now)
	r := h.run(t)
	require.Contains(t, r.Skipped, "outside the renewal window")
	require.Empty(t, h.fleet.asked)
}

func TestPace(t *testing.T) {
	batch, tick := Policy{Rate: 10}.Pace()
	require.Equal(t, 1, batch)
	require.Equal(t, 6*time.Second, tick)
	batch, tick = Policy{Rate: 600}.Pace()
	require.Equal(t, 10, batch)
	require.Equal(t, time.Second, tick)
}

// Each host found is asked once at the rate: one that accepts is renewed and its run started
// with source renewal after the restart window; one that does not answer is asked three times
// and reported unreachable; one that answers with an error is reported refused at once. An
// identity already expired is asked too, and reported.
func TestRenewsAtTheRateAndRecordsEachOutcome(t *testing.T) {
	start := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	hosts := []Expiring{
		{Identity: "lapsed.example", RunID: "r0", Expires: start.Add(-time.Hour)},
		{Identity: "ok.example", RunID: "r1", Expires: start.Add(time.Hour)},
		{Identity: "silent.example", RunID: "r2", Expires: start.Add(2 * time.Hour)},
		{Identity: "refuses.example", RunID: "r3", Expires: start.Add(3 * time.Hour)},
	}
	replies := map[string]error{
		"silent.example":  reprovision.ErrNoReply,
		"refuses.example": errors.Join(reprovision.ErrErrorReply, errors.New("Incorrect provision token supplied")),
	}
	h := newHarness(t, on, FindResult{Found: 4, Hosts: hosts}, replies)
	h.env.SetStartTime(start)
	r := h.run(t)

	require.Equal(t, 4, r.Found)
	require.Equal(t, 2, r.Renewed)
	require.Equal(t, []string{"lapsed.example"}, r.Expired)
	require.Len(t, r.Failed, 2)
	require.Equal(t, "silent.example", r.Failed[0].Identity)
	require.Equal(t, OutcomeUnreachable, r.Failed[0].Outcome)
	require.Contains(t, r.Failed[0].Reason, "did not answer")
	require.Equal(t, "refuses.example", r.Failed[1].Identity)
	require.Equal(t, OutcomeRefused, r.Failed[1].Outcome)
	require.Contains(t, r.Failed[1].Reason, "Incorrect provision token")
	require.Equal(t, map[string]int{"lapsed.example": 1, "ok.example": 1, "silent.example": 3, "refuses.example": 1}, h.fleet.asked)

	require.Len(t, h.temporal.started, 2)
	for i, o := range h.temporal.started {
		require.Equal(t, testQueue, o.TaskQueue)
		require.Equal(t, StartDelay(), o.StartDelay)
		require.Equal(t, workflows.SourceRenewal, h.temporal.inputs[i].Source)
	}
	require.Equal(t, workflows.WorkflowID("lapsed.example"), h.temporal.started[0].ID)
	// a host a second (rate 60): the fourth host was asked three ticks after the first
	require.GreaterOrEqual(t, h.env.Now().Sub(start), 3*time.Second)

	require.Equal(t, 2.0, testutil.ToFloat64(h.renewals.WithLabelValues("lab", OutcomeRenewed)))
	require.Equal(t, 1.0, testutil.ToFloat64(h.renewals.WithLabelValues("lab", OutcomeUnreachable)), "once per host, not per attempt")
	require.Equal(t, 1.0, testutil.ToFloat64(h.renewals.WithLabelValues("lab", OutcomeRefused)))
}

// A run that cannot be started after the server accepted is refused (discovery provisions the
// server when it announces itself), not retried: a second reprovision would be refused anyway.
func TestStartFailureIsRefused(t *testing.T) {
	h := newHarness(t, on, FindResult{Found: 1, Hosts: []Expiring{{Identity: "a.example", Expires: time.Now().Add(time.Hour)}}}, nil)
	h.temporal.failAll = true
	r := h.run(t)
	require.Len(t, r.Failed, 1)
	require.Equal(t, OutcomeRefused, r.Failed[0].Outcome)
	require.Contains(t, r.Failed[0].Reason, "could not be started")
	require.Equal(t, 1, h.fleet.asked["a.example"])
}

// A task no renewal run of ours scheduled (another workflow type, or another task queue) is
// refused before any server is asked.
func TestForeignTaskRefused(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	f := &fleet{asked: map[string]int{}}
	a := NewActivities(Deps{Temporal: &fakeTemporal{}, Starter: hostruns.Starter{TaskQueue: "ours", Site: "lab"},
		Renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"site", "outcome"}), Log: zap.NewNop()})
	a.reprovision = f.reprovision
	a.Register(env)
	_, err := env.ExecuteActivity(RenewName, RenewInput{Host: Expiring{Identity: "victim.example"}})
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	require.Equal(t, ErrTypeForeign, app.Type())
	require.Empty(t, f.asked)
	_, err = env.ExecuteActivity(FindExpiringName, FindInput{Before: time.Now(), Limit: 1})
	require.ErrorAs(t, err, &app)
	require.Equal(t, ErrTypeForeign, app.Type())
}

// A host whose workflow has an open run (a renewal asked it already, its new run not yet done)
// is not asked again, nor is one this worker is renewing now: renewal runs side by side ask
// each host once.
func TestAHostIsRenewedOnce(t *testing.T) {
	h := newHarness(t, on, FindResult{Found: 2, Hosts: []Expiring{
		{Identity: "asked.example", Expires: time.Now().Add(time.Hour)},
		{Identity: "due.example", Expires: time.Now().Add(2 * time.Hour)},
	}}, nil)
	h.temporal.open = map[string]bool{workflows.WorkflowID("asked.example"): true}
	r := h.run(t)
	require.Equal(t, 1, r.Renewed)
	require.Len(t, r.Failed, 1)
	require.Equal(t, "asked.example", r.Failed[0].Identity)
	require.Equal(t, OutcomeRefused, r.Failed[0].Outcome)
	require.Contains(t, r.Failed[0].Reason, "is open")
	require.Equal(t, map[string]int{"due.example": 1}, h.fleet.asked)

	a := NewActivities(Deps{Temporal: &fakeTemporal{}, Starter: hostruns.Starter{TaskQueue: testQueue, Site: "lab"}, Renewals: h.renewals, Log: zap.NewNop()})
	release, err := a.claim(context.Background(), Expiring{Identity: "busy.example"})
	require.NoError(t, err)
	_, err = a.claim(context.Background(), Expiring{Identity: "busy.example"})
	require.ErrorContains(t, err, "under way", "a second renewal of a host this worker renews now")
	release()
	release, err = a.claim(context.Background(), Expiring{Identity: "busy.example"})
	require.NoError(t, err, "claimed again once the first is done")
	release()
}

// The worker's renewal budget: one run at the rate (its batches a tick, two at once when one
// batch's attempts start late) is never deferred; four runs side by side get the rate between them, the rest
// deferred and counted.
func TestRunsSideBySideShareTheWorkersRate(t *testing.T) {
	const perMinute = 300.0 // 5 a second, one batch of 5 a one-second tick
	batch, tick := Policy{Rate: perMinute}.Pace()
	renewals := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"site", "outcome"})
	newWorker := func() *Activities {
		return NewActivities(Deps{Temporal: &fakeTemporal{}, Starter: hostruns.Starter{TaskQueue: testQueue, Site: "lab"},
			Renewals: renewals, Log: zap.NewNop(), Rate: perMinute})
	}
	t0 := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	one := newWorker()
	for i := range 60 {
		at := t0.Add(time.Duration(i/batch) * tick)
		if i/batch == 3 {
			at = t0.Add(4 * tick) // tick 3's attempts started late, with tick 4's
		}
		require.NoError(t, one.paced(Expiring{Identity: "h"}, at), "one run, host %d", i)
	}

	shared := newWorker()
	allowed := 0
	for i := range 60 {
		at := t0.Add(time.Duration(i/batch) * tick)
		for range 4 {
			if shared.paced(Expiring{Identity: "h"}, at) == nil {
				allowed++
			}
		}
	}
	// 12 ticks: the first batch and two of room, then 5 a second
	require.LessOrEqual(t, allowed, 2*batch+11*batch)
	require.GreaterOrEqual(t, allowed, 60, "the rate itself is spent")
	require.Equal(t, float64(4*60-allowed), testutil.ToFloat64(renewals.WithLabelValues("lab", OutcomeDeferred)))
	// attempts that reach the worker out of their start order are not credited twice
	b, spent := newPace(perMinute), 0
	for i := range 20 {
		for k := range 4 * batch { // by turns, started now and 0.9 ticks ago
			at := t0.Add(time.Duration(i) * tick)
			if k%2 == 1 {
				at = at.Add(-9 * tick / 10)
			}
			if b.spend(at) {
				spent++
			}
		}
	}
	require.LessOrEqual(t, spent, 2*batch+19*batch)

	var app *temporal.ApplicationError
	require.ErrorAs(t, shared.paced(Expiring{Identity: "h"}, t0.Add(11*tick)), &app)
	require.Equal(t, ErrTypeDeferred, app.Type())
	require.Equal(t, OutcomeDeferred, OutcomeOf(app))
}
