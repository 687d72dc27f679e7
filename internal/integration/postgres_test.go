package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/internal/dev/procstat"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// The production shape (docs/deployment.md): a Temporal server (frontend, history, matching and
// worker services) persisting to PostgreSQL, two provisioner processes as workers, a simulated
// fleet; one provisioner is killed with SIGKILL mid-run and started again. Every host must be
// provisioned, none configured by two steps or runs. 200 hosts in make test, 1,000 with
// FAULTS_SCALE=1.
func TestIntegrationFaultPostgresKillReplica(t *testing.T) {
	hosts := 200
	if os.Getenv("FAULTS_SCALE") != "" {
		hosts = 1000
	}
	srv := startSQLTemporal(t)
	e := newEnv(t, envOptions{temporalAddress: srv.Address})
	status := e.startFleetSim(hosts, "--prefix", "pg-")
	start := time.Now()
	first := e.processProvisioner("replica-a")
	second := e.processProvisioner("replica-b")

	require.Eventually(t, func() bool {
		return simCount(status(), func(h fleetsim.HostState) bool { return h.Configured }) >= hosts/4
	}, 5*time.Minute, 200*time.Millisecond, "a quarter of the hosts were not configured")
	killedCPU := procstat.TreeCPU(first.pid())
	require.NoError(t, first.kill())
	killed := time.Now()
	atKill := simCount(status(), func(h fleetsim.HostState) bool { return h.Restarted })
	third := e.processProvisioner("replica-a-again")

	st := waitSimDone(status, hosts, 10*time.Minute)
	done := time.Now()
	mib := func(pid int) string { return fmt.Sprintf("%.0f MiB", procstat.PeakRSSMiB(pid)) }
	rss := map[string]string{"temporal-server": mib(srv.PID()), "provisioner": mib(second.pid())}
	cpu := map[string]time.Duration{"temporal-server": procstat.TreeCPU(srv.PID()), "postgres": procstat.TreeCPU(srv.Postgres.PID()),
		"provisioners": killedCPU + procstat.TreeCPU(second.pid()) + procstat.TreeCPU(third.pid())}
	restarted := simCount(st, func(h fleetsim.HostState) bool { return h.Restarted })
	// A host whose configure call reached it from a worker killed before it reported the result
	// gets the same Configure step again from another worker (activities run at least once): the
	// same input from history, so the same configuration written again, then one restart. That is
	// counted apart from a host configured by two steps or two runs, which must never happen.
	twice, redelivered := 0, 0
	for id, h := range st.Hosts {
		if h.Configures <= 1 {
			continue
		}
		if configures, attempt := e.explainHost(id, h); configures == 1 && attempt > 1 {
			redelivered++
		} else {
			twice++
		}
	}
	lost := hosts - restarted
	extra := 0
	if lost == 0 {
		for _, n := range e.runCounts() {
			extra += n - 1
		}
	}
	t.Logf("FAULT Temporal on PostgreSQL, two provisioner processes, kill -9 of one after %d of %d simulated hosts were done: provisioned %d, lost %d, provisioned more than once %d (the same configure step delivered twice %d), all done %v after the kill, %v in all (%.1f hosts/s); stale-sighting runs %d",
		atKill, hosts, restarted, lost, twice, redelivered, done.Sub(killed).Round(100*time.Millisecond), done.Sub(start).Round(100*time.Millisecond),
		float64(hosts)/done.Sub(start).Seconds(), extra)
	t.Logf("CPU (user+system) per host: temporal-server %v, postgres %v, provisioners %v (totals %v)",
		cpu["temporal-server"]/time.Duration(hosts), cpu["postgres"]/time.Duration(hosts), cpu["provisioners"]/time.Duration(hosts), cpu)
	t.Logf("peak RSS: %v", rss)
	require.Zero(t, lost, "hosts lost (temporal-server log: %s)", filepath.Join(srv.Opts.Dir, "temporal-server.log"))
	require.Zero(t, twice, "hosts configured by more than one step or run")
	for id, h := range st.Hosts {
		require.Equal(t, "false", h.Provision, id)
		require.True(t, h.ServerJWT, id)
	}
	// every host's workflow is in the PostgreSQL visibility store, found through the provisioner's
	// search attributes (hosts list)
	outcomes, others := map[string]int{}, []string{}
	require.Eventually(t, func() bool {
		l, err := e.operator().List(context.Background(), operator.Filter{})
		if err != nil || len(l) != hosts {
			return false
		}
		clear(outcomes)
		others = others[:0]
		for _, h := range l {
			outcomes[h.Outcome]++
			if h.Outcome != workflows.OutcomeProvisioned {
				others = append(others, fmt.Sprintf("%s: %s at %s after %d runs: %s", h.Identity, h.Outcome, h.Step, h.Runs, h.Reason))
			}
		}
		return outcomes[workflows.OutcomeRunning] == 0
	}, 2*time.Minute, time.Second, "hosts list does not show every host closed")
	// a stale-sighting run that ends failed leaves a provisioned host looking failed (reliability.md)
	t.Logf("latest run of each host by outcome: %v %s", outcomes, strings.Join(others, "; "))
	require.NotZero(t, outcomes[workflows.OutcomeProvisioned])
}

// startSQLTemporal starts PostgreSQL and a Temporal server on it for one test. Without the
// PostgreSQL binaries the test is skipped, except in CI (CI set), where make deps installs them.
// o's Dir and binaries are filled in.
func startSQLTemporal(t *testing.T, o ...devstack.SQLTemporalOptions) *devstack.SQLTemporal {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs PostgreSQL, a Temporal server, a broker and fleet-sim")
	}
	pg, err := devstack.FindPostgres()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and PostgreSQL is missing (make deps installs it): %v", err)
		}
		t.Skipf("production-shape test skipped, PostgreSQL is not installed: %v (with CI set this fails)", err)
	}
	server, err := devstack.FindTool("temporal-server")
	require.NoError(t, err)
	sqlTool, err := devstack.FindTool("temporal-sql-tool")
	require.NoError(t, err)
	began := time.Now()
	opts := devstack.SQLTemporalOptions{Retention: 24 * time.Hour}
	if len(o) > 0 {
		opts = o[0]
	}
	opts.Dir, opts.ServerBin, opts.SQLToolBin, opts.PostgresBin = t.TempDir(), server, sqlTool, pg
	srv, err := devstack.StartSQLTemporal(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	t.Logf("PostgreSQL (%s) and temporal-server ready in %v, frontend %s (mutual TLS: %v)", pg, time.Since(began).Round(100*time.Millisecond), srv.Address, opts.TLS != nil)
	return srv
}

// waitSimDone waits until n simulated hosts restarted or the time is up, and returns the last
// status either way (the caller counts what was lost).
func waitSimDone(status func() fleetsim.Status, n int, timeout time.Duration) fleetsim.Status {
	deadline := time.Now().Add(timeout)
	for {
		st := status()
		if simCount(st, func(h fleetsim.HostState) bool { return h.Restarted }) == n || time.Now().After(deadline) {
			return st
		}
		time.Sleep(time.Second)
	}
}

// explainHost logs every run of a host with its activities (the type, the attempt and the worker
// that started it, and how it ended) and returns how many Configure steps all its runs had and the
// attempt that ran the last one.
func (e *env) explainHost(id string, h fleetsim.HostState) (configures int, attempt int32) {
	e.t.Helper()
	resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowId = '" + workflows.WorkflowID(id) + "'"})
	require.NoError(e.t, err)
	for _, ex := range resp.Executions {
		var steps []string
		it := e.client.GetWorkflowHistory(context.Background(), ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		names := map[int64]string{}
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(e.t, err)
			switch {
			case ev.GetWorkflowExecutionStartedEventAttributes() != nil:
				steps = append(steps, e.startedBy(ev.GetWorkflowExecutionStartedEventAttributes()))
			case ev.GetActivityTaskScheduledEventAttributes() != nil:
				names[ev.GetEventId()] = ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
				if names[ev.GetEventId()] == activities.ConfigureName {
					configures++
				}
			case ev.GetActivityTaskStartedEventAttributes() != nil:
				a := ev.GetActivityTaskStartedEventAttributes()
				if names[a.GetScheduledEventId()] == activities.ConfigureName {
					attempt = a.GetAttempt()
				}
				steps = append(steps, fmt.Sprintf("%s started attempt %d by %s", names[a.GetScheduledEventId()], a.GetAttempt(), a.GetIdentity()))
			case ev.GetActivityTaskCompletedEventAttributes() != nil:
				steps = append(steps, names[ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]+" completed")
			case ev.GetActivityTaskFailedEventAttributes() != nil:
				a := ev.GetActivityTaskFailedEventAttributes()
				steps = append(steps, names[a.GetScheduledEventId()]+" failed: "+a.GetFailure().GetMessage())
			case ev.GetActivityTaskTimedOutEventAttributes() != nil:
				a := ev.GetActivityTaskTimedOutEventAttributes()
				steps = append(steps, names[a.GetScheduledEventId()]+" timed out: "+a.GetFailure().GetMessage())
			}
		}
		e.t.Logf("%s configured %d times; run %s (%v, started %v, closed %v): %s", id, h.Configures, ex.GetExecution().GetRunId(), ex.GetStatus(),
			ex.GetStartTime().AsTime().Format(time.StampMilli), ex.GetCloseTime().AsTime().Format(time.StampMilli), strings.Join(steps, "; "))
	}
	return configures, attempt
}

// startedBy says which client started a run and with what sighting (its input, decoded as the
// provisioner decodes it), for explaining a run nobody expected.
func (e *env) startedBy(a *historypb.WorkflowExecutionStartedEventAttributes) string {
	e.t.Helper()
	dc, _, err := service.DataConverter(e.cfg)
	require.NoError(e.t, err)
	var in workflows.ProvisionInput
	if err := dc.FromPayloads(a.GetInput(), &in); err != nil {
		return fmt.Sprintf("started by %s (input unreadable: %v)", a.GetIdentity(), err)
	}
	return fmt.Sprintf("started by %s for a %s sighting at %s", a.GetIdentity(), in.Source, in.SeenAt.Format(time.StampMilli))
}
