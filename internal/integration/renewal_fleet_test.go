package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/renewal"
	"github.com/choria-temporal/provisioner/workflows"
)

// A server that does not answer the reprovision request (a simulated host that, once
// provisioned, answers nothing on the subjects renewal reaches) is asked three times per run,
// reported unreachable, listed by `hosts list --renewal failed` (exit 1), counted in
// renewals_total{outcome="unreachable"} once per run, found again by the next Schedule run, and
// never counted renewed nor given a renewal run.
func TestIntegrationRenewalUnreachableServer(t *testing.T) {
	t.Parallel() // most of it waits for two Schedule runs and their retries
	e := newEnv(t, envOptions{prepare: withRenewal("1m", "  renew_before: 2m\n  interval: 2s\n  rate: 600\nrpc_timeout: 2s\n", simFleetConfig)})
	status := e.startFleetSimAs("silent", 1, "--prefix", "rensilent-", "--no-restart-splay")
	svc := e.provisioner("replica-a")
	waitSimRestarted(t, status, 1, 60*time.Second)
	id := "rensilent-sim-00000.example"
	start := time.Now()
	e.setupRenewal()
	unreachable := svc.Metrics.Renewals.WithLabelValues("dev", renewal.OutcomeUnreachable)
	require.Eventually(t, func() bool { return testutil.ToFloat64(unreachable) >= 2 }, 90*time.Second, 500*time.Millisecond,
		"two Schedule runs each find the host and report it unreachable")
	t.Logf("two renewal runs reported %s unreachable %v after setup", id, time.Since(start).Round(time.Millisecond))

	latest, err := renewal.LatestResult(context.Background(), e.client, e.cfg.Temporal.TaskQueue)
	require.NoError(t, err)
	require.NotNil(t, latest)
	require.Equal(t, 1, latest.Result.Found)
	require.Zero(t, latest.Result.Renewed)
	require.Len(t, latest.Result.Failed, 1)
	require.Equal(t, id, latest.Result.Failed[0].Identity)
	require.Equal(t, renewal.OutcomeUnreachable, latest.Result.Failed[0].Outcome)
	require.Contains(t, latest.Result.Failed[0].Reason, "did not answer")
	e.writeReplayHistoryOf("renewal-unreachable", latest.WorkflowID)

	out, code := e.cli(nil, "list", "--renewal", "failed")
	require.Equal(t, 1, code, "a listed failure exits 1: %s", out)
	require.Contains(t, out, id)
	require.Contains(t, out, "unreachable")
	require.Contains(t, out, "1 hosts")
	out, code = e.cli(nil, "renewal", "status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "renewed 0, failed 1")
	t.Logf("hosts renewal status:\n%s", out)

	// setup again updates the one Schedule; pause and resume reach it
	out, code = e.cliCmd("setup", "--config", e.stack.ConfigFile)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "updated the renewal Schedule")
	for _, step := range []struct{ cmd, state string }{{"pause", "paused"}, {"resume", "active"}} {
		out, code = e.cli(nil, "renewal", step.cmd)
		require.Equal(t, 0, code, out)
		out, code = e.cli(nil, "renewal", "status")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, ": "+step.state, out)
	}

	require.Zero(t, testutil.ToFloat64(svc.Metrics.Renewals.WithLabelValues("dev", renewal.OutcomeRenewed)))
	runs := e.hostRuns(id)
	require.Len(t, runs, 1, "no run was started for an unreachable host")
	require.NotEqual(t, workflows.SourceRenewal, runs[0].Source)
	require.True(t, status().Hosts[id].Restarted, "the host was never put back into provisioning mode")
}

// seedIdentities writes n identity records that the renewal's query cannot tell from real
// provisioned runs: completed ProvisionHost runs on the provisioner's task queue, with the
// search attributes a provisioned run ends with. A test worker on that queue completes them at
// once; it runs alone (no provisioner worker yet), so it takes no real host's task.
func (e *env) seedIdentities(prefix string, n int, expires func(i int) time.Time) {
	e.t.Helper()
	tq := e.cfg.Temporal.TaskQueue
	w := worker.New(e.client, tq, worker.Options{MaxConcurrentWorkflowTaskPollers: 8})
	w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: workflows.WorkflowName})
	require.NoError(e.t, w.Start())
	defer w.Stop()
	ctx := context.Background()
	issued := time.Now().UTC()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				id := fmt.Sprintf("%s%05d.example", prefix, i)
				opts := client.StartWorkflowOptions{ID: workflows.WorkflowID(id), TaskQueue: tq, TypedSearchAttributes: temporal.NewSearchAttributes(
					workflows.IdentityKey.ValueSet(id), workflows.SiteKey.ValueSet("dev"), workflows.OutcomeKey.ValueSet(workflows.OutcomeProvisioned),
					workflows.SourceKey.ValueSet(workflows.SourceDiscovery), workflows.IssuedKey.ValueSet(issued),
					workflows.ExpiresKey.ValueSet(expires(i)), workflows.SignerKey.ValueSet("ed25519:seeded"))}
				if _, err := e.client.ExecuteWorkflow(ctx, opts, workflows.WorkflowName); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(e.t, <-errs)
	query := fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s' AND ExecutionStatus = 'Completed' AND %s STARTS_WITH '%s'",
		workflows.WorkflowName, tq, workflows.IdentityKey.GetName(), prefix)
	require.Eventually(e.t, func() bool {
		resp, err := e.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		return err == nil && resp.GetCount() == int64(n)
	}, 5*time.Minute, 500*time.Millisecond, "the seeded runs completed and visible")
}

// defaultRenewalIdentities keeps the scale test short in make test; its renewal run is the one
// recorded for the replay test.
const defaultRenewalIdentities = 1000

// renewalIdentities is the scale test's number of identities: 1,000 in make test,
// RENEWAL_IDENTITIES=10000 for the acceptance size.
func renewalIdentities(t *testing.T) int {
	n := defaultRenewalIdentities
	if v := os.Getenv("RENEWAL_IDENTITIES"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, n, 100)
	return n
}

// N identity records with expiries spread over a year, 1 % of them inside renew_before: one
// renewal run finds exactly that 1 % by its query, asks each at the rate, and each is
// provisioned again by a run with source renewal; the run's cost is logged.
func TestIntegrationRenewalScale(t *testing.T) {
	t.Parallel() // most of it waits on the paced renewals
	n := renewalIdentities(t)
	k := n / 100
	const rate = 300.0 // hosts a minute: 5 a second
	e := newEnv(t, envOptions{prepare: withRenewal("10d", fmt.Sprintf("  renew_before: 30d\n  interval: 1h\n  rate: %v\n", rate), simFleetConfig)})
	ctx := context.Background()

	seedStart := time.Now()
	year, before := 365*24*time.Hour, 30*24*time.Hour
	// the 99 %: expiries spread evenly over (renew_before, a year]
	e.seedIdentities("renseed-", n-k, func(i int) time.Time {
		return time.Now().Add(before + time.Hour + time.Duration(float64(year-before-time.Hour)*float64(i)/float64(n-k)))
	})
	seeding := time.Since(seedStart)
	// the 1 %: real (simulated) hosts, provisioned by the provisioner with 10-day JWTs
	// with go-choria's restart splays: without, a host back in provisioning mode announces itself
	// before the renewal starts its run, and discovery's start (source event) comes first
	status := e.startFleetSimAs("renewable", k, "--prefix", "renscale-", "--renewable")
	provStart := time.Now()
	svc := e.provisioner("replica-a")
	waitSimRestarted(t, status, k, 3*time.Minute)
	t.Logf("seeded %d identity records in %v (%.0f/s); %d simulated hosts provisioned in %v", n-k, seeding.Round(time.Millisecond),
		float64(n-k)/seeding.Seconds(), k, time.Since(provStart).Round(time.Millisecond))

	e.setupRenewal()
	runStart := time.Now()
	require.NoError(t, e.client.ScheduleClient().GetHandle(ctx, renewal.ScheduleID(e.cfg.Temporal.TaskQueue)).Trigger(ctx, client.ScheduleTriggerOptions{}))
	var latest *renewal.LatestRun
	if !assert.Eventually(t, func() bool {
		l, err := renewal.LatestResult(ctx, e.client, e.cfg.Temporal.TaskQueue)
		latest = l
		return err == nil && l != nil
	}, 3*time.Minute, 250*time.Millisecond, "the triggered renewal run completes") {
		e.dumpRenewalRuns()
		t.FailNow()
	}
	require.Equal(t, k, latest.Result.Found, "exactly the 1 %% inside renew_before")
	require.Equal(t, k, latest.Result.Renewed)
	require.Empty(t, latest.Result.Failed)
	require.Equal(t, float64(k), testutil.ToFloat64(svc.Metrics.Renewals.WithLabelValues("dev", renewal.OutcomeRenewed)))
	e.reportRenewalRun(latest, k, rate, time.Since(runStart))
	if n == defaultRenewalIdentities {
		e.writeReplayHistoryOf("renewal-scale", latest.WorkflowID)
	}

	require.Eventually(t, func() bool {
		return simCount(status(), func(h fleetsim.HostState) bool { return h.Reprovisions == 1 && h.Restarted }) == k
	}, 3*time.Minute, time.Second, "every renewed host provisioned again")
	t.Logf("%d hosts renewed and provisioned again %v after the trigger", k, time.Since(runStart).Round(time.Millisecond))
	for id := range status().Hosts {
		runs := e.hostRuns(id)
		require.Len(t, runs, 2, id)
		require.Equal(t, workflows.SourceRenewal, runs[1].Source, id)
		require.Equal(t, workflows.OutcomeProvisioned, runs[1].Outcome, id)
		require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, runs[1].Status, id)
	}
}

// dumpRenewalRuns logs where the task queue's renewal runs stand, for a failure to be read
// without a rerun.
func (e *env) dumpRenewalRuns() {
	query := fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s'", renewal.WorkflowName, e.cfg.Temporal.TaskQueue)
	resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
	if err != nil {
		e.t.Logf("listing renewal runs: %v", err)
		return
	}
	for _, ex := range resp.GetExecutions() {
		id, run := ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId()
		e.t.Logf("renewal run %s %s: %s", id, run, ex.GetStatus())
		if d, err := e.client.DescribeWorkflowExecution(context.Background(), id, run); err == nil {
			for _, pa := range d.GetPendingActivities() {
				e.t.Logf("  pending %s attempt %d: %v", pa.GetActivityType().GetName(), pa.GetAttempt(), pa.GetLastFailure().GetMessage())
			}
		}
		for _, f := range e.activityFailures(e.runHistory(id, run)) {
			e.t.Logf("  activity failure: %s", f)
		}
	}
	b, _ := os.ReadFile(filepath.Join(e.stack.Opts.Dir, "replica-a.log"))
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "renewal") || strings.Contains(line, `"level":"error"`) {
			e.t.Log(line)
		}
	}
}

// reportRenewalRun logs the run's history (events, activities, timers) and duration, and checks
// that its Renew activities were spread at the rate.
func (e *env) reportRenewalRun(l *renewal.LatestRun, k int, rate float64, took time.Duration) {
	e.t.Helper()
	events := e.runHistory(l.WorkflowID, l.RunID)
	var renews []time.Time
	timers, tasks := 0, 0
	var found time.Duration // from the run's start to its listing's result: the visibility query
	for _, ev := range events {
		switch {
		case ev.GetActivityTaskCompletedEventAttributes() != nil && found == 0:
			found = ev.GetEventTime().AsTime().Sub(events[0].GetEventTime().AsTime())
		case ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == renewal.RenewName:
			renews = append(renews, ev.GetEventTime().AsTime())
		case ev.GetTimerStartedEventAttributes() != nil:
			timers++
		case ev.GetWorkflowTaskCompletedEventAttributes() != nil:
			tasks++
		}
	}
	require.Len(e.t, renews, k)
	span := renews[len(renews)-1].Sub(renews[0])
	batch, tick := renewal.Policy{Rate: rate}.Pace()
	want := time.Duration((k+batch-1)/batch-1) * tick
	e.t.Logf("renewal run %s: %d history events, %d workflow tasks, %d timers, %d Renew activities over %v (the rate allows no less than %v); "+
		"the listing took %v of the run's start; trigger to result in %v", l.WorkflowID, len(events), tasks, timers, len(renews), span.Round(time.Millisecond), want,
		found.Round(time.Millisecond), took.Round(time.Millisecond))
	require.GreaterOrEqual(e.t, span, want-100*time.Millisecond, "the Renew activities kept to the rate")
}
