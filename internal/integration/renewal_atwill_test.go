package integration

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/renewal"
	"github.com/choria-temporal/provisioner/workflows"
)

// The renewal started at will, as any namespace client can (RenewIdentities takes no input):
// once the Schedule's run is under way, four more are started beside it. A host is taken by
// whichever run reaches it first and refused to the others (counted); the runs' asks together
// keep to the worker's rate, what it leaves over deferred (counted); no host is asked twice, and
// each renewed host is provisioned again by one run. Without the worker's budget the same runs
// asked 27 hosts in 2.3 s at a rate of 5 a second.
func TestIntegrationRenewalStartedAtWillRenewsEachHostOnce(t *testing.T) {
	t.Parallel() // most of it waits on the paced renewals
	const k = 40
	const rate = 300.0 // hosts a minute: 5 a second
	e := newEnv(t, envOptions{prepare: withRenewal("10d", fmt.Sprintf("  renew_before: 30d\n  interval: 1h\n  rate: %v\n", rate), simFleetConfig)})
	ctx := context.Background()
	status := e.startFleetSimAs("atwill", k, "--prefix", "renwill-", "--renewable")
	svc := e.provisioner("replica-a")
	waitSimRestarted(t, status, k, 3*time.Minute)
	e.setupRenewal()
	renewed := svc.Metrics.Renewals.WithLabelValues("dev", renewal.OutcomeRenewed)
	deferred := svc.Metrics.Renewals.WithLabelValues("dev", renewal.OutcomeDeferred)
	refused := svc.Metrics.Renewals.WithLabelValues("dev", renewal.OutcomeRefused)

	schedule := e.client.ScheduleClient().GetHandle(ctx, renewal.ScheduleID(e.cfg.Temporal.TaskQueue))
	require.NoError(t, schedule.Trigger(ctx, client.ScheduleTriggerOptions{}))
	require.Eventually(t, func() bool { return testutil.ToFloat64(renewed) >= 10 }, time.Minute, 50*time.Millisecond,
		"the Schedule's run is renewing")
	for i := range 4 {
		_, err := e.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("renewal-at-will:%s-%d", e.cfg.Temporal.TaskQueue, i),
			TaskQueue: e.cfg.Temporal.TaskQueue}, renewal.WorkflowName)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return e.closedRenewalRuns() == 5 }, 2*time.Minute, 250*time.Millisecond, "the five runs end")
	t.Logf("five runs side by side: %v renewed, %v deferred, %v refused", testutil.ToFloat64(renewed), testutil.ToFloat64(deferred),
		testutil.ToFloat64(refused))
	require.Positive(t, testutil.ToFloat64(refused), "the hosts another run had taken were refused, and counted")
	e.requireRenewsKeptToTheRate(rate)

	// each host asked once at most, by one run, and provisioned again; a host the budget deferred
	// in every run that reached it is left to the next run (its identity is still due: not run
	// here, as the 10-day identities it would find are all inside renew_before again)
	n := int(testutil.ToFloat64(renewed))
	require.GreaterOrEqual(t, n+int(testutil.ToFloat64(deferred)), k, "each host renewed, or deferred")
	if !assert.Eventually(t, func() bool {
		return simCount(status(), func(h fleetsim.HostState) bool { return h.Reprovisions == 1 && h.Restarted }) == n
	}, 2*time.Minute, 250*time.Millisecond, "every renewed host provisioned again") {
		e.dumpRenewalRuns()
		t.FailNow()
	}
	for id, h := range status().Hosts {
		require.LessOrEqual(t, h.Reprovisions, int32(1), "%s asked once at most", id)
		runs := e.hostRuns(id)
		require.Len(t, runs, 1+int(h.Reprovisions), id)
		if h.Reprovisions == 1 {
			require.Equal(t, workflows.SourceRenewal, runs[1].Source, id)
			require.Equal(t, workflows.OutcomeProvisioned, runs[1].Outcome, id)
		}
	}
}

// closedRenewalRuns counts the task queue's renewal runs that have ended.
func (e *env) closedRenewalRuns() int {
	e.t.Helper()
	resp, err := e.client.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s' AND ExecutionStatus != 'Running'", renewal.WorkflowName, e.cfg.Temporal.TaskQueue)})
	require.NoError(e.t, err)
	return int(resp.GetCount())
}

// requireRenewsKeptToTheRate checks, from every renewal run's history, that the Renew attempts
// which asked a host (those that completed) started no faster than rate a minute between them:
// within any span, at most the worker's room of two batches and the rate over the span and a tick.
func (e *env) requireRenewsKeptToTheRate(rate float64) {
	e.t.Helper()
	resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s'", renewal.WorkflowName, e.cfg.Temporal.TaskQueue)})
	require.NoError(e.t, err)
	var asked []time.Time
	for _, ex := range resp.GetExecutions() {
		started := map[int64]time.Time{} // a Renew's scheduled event ID -> its attempt's start
		renews := map[int64]bool{}
		for _, ev := range e.runHistory(ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId()) {
			if a := ev.GetActivityTaskScheduledEventAttributes(); a.GetActivityType().GetName() == renewal.RenewName {
				renews[ev.GetEventId()] = true
			}
			if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && renews[a.GetScheduledEventId()] {
				started[a.GetScheduledEventId()] = ev.GetEventTime().AsTime()
			}
			if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
				if at, ok := started[a.GetScheduledEventId()]; ok {
					asked = append(asked, at)
				}
			}
		}
	}
	sort.Slice(asked, func(i, j int) bool { return asked[i].Before(asked[j]) })
	batch, tick := renewal.Policy{Rate: rate}.Pace()
	for i := range asked {
		for j := i; j < len(asked); j++ {
			span := asked[j].Sub(asked[i])
			// a tick of slack: the events' times and the attempts' start times the worker paces
			// on differ by up to ~0.1 s
			allowed := 2*batch + int(rate/60*(span+tick).Seconds())
			require.LessOrEqual(e.t, j-i+1, allowed, "%d hosts asked within %v", j-i+1, span)
		}
	}
	e.t.Logf("%d hosts asked over %v (the rate allows %v)", len(asked), asked[len(asked)-1].Sub(asked[0]).Round(time.Millisecond),
		time.Duration(float64(len(asked)-2*batch)/(rate/60)*float64(time.Second)))
}
