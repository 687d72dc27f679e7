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
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// The upgrade story (docs/architecture.md, "Upgrading the workflow"), as a site upgrades: two
// replicas, each its own process, 500 simulated hosts in flight and a tenth of them deferred on
// a durable timer. One replica is stopped and started again as a build whose host workflow
// changed (internal/dev/nextbuild: a GetVersion-guarded extra step); it is down for 10 s once
// while the other still runs the old build; the other is upgraded last. Every host is
// provisioned and configured once, the deferred ones too; no workflow task fails as
// non-deterministic; once the new build is current no replica of the old one completes a task of
// a run the new build has run, and the runs the old build began finish on the new one.
//
// With PROVISIONER_TEMPORAL__WORKER_VERSIONING=false (patching alone) the same run can fail: the
// stopped replica's runs may go to the old one, which cannot replay the new step.
func TestIntegrationRollingUpgrade(t *testing.T) {
	const hosts = 500
	const oldBuild, newBuild = "1.0.0", "1.1.0"
	// longer than the upgrade takes: hosts deferred on the old build wake on the new one
	t.Setenv("PROVISIONER_DEFER_DELAY", "20s")
	var deferred string
	e := newEnv(t, envOptions{servers: 0, helper: func(s *devstack.Stack) string {
		deferred = filepath.Join(s.Opts.Dir, "deferred")
		return deferringHelper(t, s, deferred, "0.example")
	}})
	status := e.startFleetSim(hosts, "--prefix", "roll-", "--no-restart-splay")
	configured := func() int { return simCount(status(), func(h fleetsim.HostState) bool { return h.Configured }) }
	waitConfigured := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { return configured() >= n }, 2*time.Minute, 200*time.Millisecond, "%d hosts configured", n)
	}
	start := time.Now()
	oldA := e.buildReplica("old-a", oldBuild, false)
	oldB := e.buildReplica("old-b", oldBuild, false)
	e.waitCurrent(oldA, oldBuild)

	// in flight: a fifth configured, some hosts deferred and waiting on their timers
	require.Eventually(t, func() bool { return configured() >= hosts/5 && countFiles(t, deferred) >= 10 }, 2*time.Minute, 200*time.Millisecond)
	upgrade := time.Now()
	deferredBefore := countFiles(t, deferred)
	oldA.stop() // the package's upgrade restarts the service: SIGTERM, the worker drains
	drained := time.Since(upgrade)
	newA := e.buildReplica("new-a", newBuild, true)
	promoted := e.waitCurrent(newA, newBuild)

	// the upgraded replica is down for a while (its machine reboots, a restart that failed
	// waits systemd's RestartSec of 10 s) while the other still runs the old build: its worker
	// gave up its runs' stickiness as it stopped
	waitConfigured(hosts * 2 / 5)
	newA.stop()
	time.Sleep(10 * time.Second)
	newA2 := e.buildReplica("new-a-2", newBuild, true)
	e.waitCurrent(newA2, newBuild)

	waitConfigured(hosts * 3 / 5)
	oldB.stop()
	newB := e.buildReplica("new-b", newBuild, true)
	window := time.Since(upgrade)

	st := waitSimRestarted(t, status, hosts, 3*time.Minute)
	took := time.Since(start)
	twice := e.simTally(st)
	for id, h := range st.Hosts {
		if h.Configures != 1 {
			e.explainHost(id, h) // what a failure needs to be read without a rerun
		}
	}
	e.waitNoneRunning()

	procs := []*replicaProc{oldA, oldB, newA, newA2, newB}
	r := e.upgradeReport(procs, oldBuild, newBuild)
	newA2.stop()
	newB.stop()
	ndeMetric, ndeLogs := 0.0, 0
	for _, rep := range procs {
		ndeMetric += rep.ndeMetric
		ndeLogs += e.logLines(rep.name, "TMPRL1100")
	}
	t.Logf("ROLLING UPGRADE %d simulated hosts (%d deferred, %d of them before the upgrade), %s -> %s, worker versioning %v: "+
		"all provisioned in %v; the old replica drained in %v, the new build current %v after its replica started; "+
		"window with an old replica %v (the new one down 10 s in it); runs %d (old build only %d, old then new %d, new only %d), "+
		"with the new step %d; history events/host %.1f; workflow tasks failed %d, non-deterministic %d (SDK metric %v, log lines %d); "+
		"old-build tasks after a new-build one %d, steps the new build scheduled that the old one ran %d; configured other than once %d",
		hosts, countFiles(t, deferred), deferredBefore, oldBuild, newBuild, e.cfg.Temporal.WorkerVersioning, took.Round(time.Second),
		drained.Round(100*time.Millisecond), promoted.Round(100*time.Millisecond), window.Round(time.Second),
		r.runs, r.oldOnly, r.mixed, r.newOnly, r.newStep, float64(r.events)/float64(r.runs),
		r.taskFailures, r.nde, ndeMetric, ndeLogs, r.oldAfterNew, r.oldActivitiesAfterNew, twice)
	require.Zero(t, twice, "hosts configured other than exactly once")
	require.Zero(t, r.nde, "workflow tasks failed as non-deterministic: %v", r.ndeRuns)
	require.Zero(t, ndeMetric, "the SDK's count of non-determinism failures")
	require.Zero(t, ndeLogs, "the SDK's non-determinism error in a replica's log")
	require.Zero(t, r.oldAfterNew, "a replica of the old build ran a task of a run the new build had run: %v", r.oldAfterNewRuns)
	require.Zero(t, r.oldActivitiesAfterNew, "a replica of the old build ran a step the new build scheduled")
	require.Positive(t, r.newStep, "runs took the new build's path")
	require.Positive(t, r.mixedDeferred, "hosts deferred on the old build finished on the new one")
	for _, id := range listFiles(t, deferred) {
		require.True(t, st.Hosts[id].Restarted, "deferred host %s provisioned", id)
		require.Positive(t, r.timers[workflows.WorkflowID(id)], "%s waited on a durable timer", id)
	}
}

// Worker versioning turned off on a deployment that has a current build: Temporal routes every
// run to that build, so the unversioned replica runs nothing and says so, with the command that
// hands the deployment back to unversioned workers; after it, the hosts are provisioned.
func TestIntegrationUnversionedReplicaSaysWhyItIdles(t *testing.T) {
	e := newEnv(t, envOptions{servers: 0})
	versioned := e.buildReplica("versioned", "1.0.0", false)
	e.waitCurrent(versioned, "1.0.0")
	versioned.stop()

	t.Setenv("PROVISIONER_TEMPORAL__WORKER_VERSIONING", "false")
	e.buildReplica("unversioned", "1.0.0", false)
	deployment := service.DeploymentName(e.cfg.Temporal.TaskQueue)
	remedy := "temporal worker deployment set-current-version --deployment-name " + deployment + " --unversioned"
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, "unversioned.log"))
		return err == nil && strings.Contains(string(b), remedy)
	}, 60*time.Second, 100*time.Millisecond, "the unversioned replica says why it runs no host")

	e.temporalCLI("worker", "deployment", "set-current-version", "--deployment-name", deployment, "--unversioned", "--yes")
	status := e.startFleetSim(3, "--prefix", "unv-", "--no-restart-splay")
	waitSimRestarted(t, status, 3, 60*time.Second)
}

// deferringHelper is the example helper, except that it defers, once, every host whose identity
// ends in suffix, noting it in dir.
func deferringHelper(t *testing.T, s *devstack.Stack, dir, suffix string) string {
	require.NoError(t, os.MkdirAll(dir, 0o755))
	script := filepath.Join(s.Opts.Dir, "deferring-helper.sh")
	body := fmt.Sprintf(`#!/bin/sh
input=$(cat)
id=$(printf '%%s' "$input" | sed -n 's/.*"identity":"\([^"]*\)".*/\1/p')
case "$id" in
*%[1]s)
  if [ ! -f %[2]s/"$id" ]; then : > %[2]s/"$id"; echo '{"defer":true,"msg":"waiting for the CMDB"}'; exit 0; fi;;
esac
printf '%%s' "$input" | %[3]s
`, suffix, dir, s.HelperCommand)
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	return script
}

// cmdbDeferHelper writes a helper that defers identity for ever ("CMDB has no record") and hands
// every other host to the stack's helper.
func cmdbDeferHelper(t *testing.T, s *devstack.Stack, identity string) string {
	t.Helper()
	script := filepath.Join(s.Opts.Dir, "cmdb-helper.sh")
	body := fmt.Sprintf(`#!/bin/sh
input=$(cat)
case "$input" in
*'"identity":"%[1]s"'*) echo '{"defer":true,"msg":"CMDB has no record"}'; exit 0;;
esac
printf '%%s' "$input" | %[2]s
`, identity, s.HelperCommand)
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	return script
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	return names
}

func countFiles(t *testing.T, dir string) int { return len(listFiles(t, dir)) }

// replicaProc is one replica in its own process (choria-provisioner-dev replica: the product's
// service as a given build).
type replicaProc struct {
	*proc
	build     string
	started   time.Time
	port      int
	ndeMetric float64 // the SDK's non-determinism failures, read when it stops
}

func (e *env) buildReplica(name, build string, next bool) *replicaProc {
	e.t.Helper()
	port, err := devstack.FreePort()
	require.NoError(e.t, err)
	args := []string{"replica", "--config", e.stack.ConfigFile, "--build", build}
	if next {
		args = append(args, "--next")
	}
	started := time.Now()
	p := e.spawn(name, devBinary, args, "PROVISIONER_LOGFILE="+filepath.Join(e.stack.Opts.Dir, name+".log"),
		fmt.Sprintf("PROVISIONER_MONITOR_PORT=%d", port), "PROVISIONER_MONITOR_ADDRESS=127.0.0.1")
	return &replicaProc{proc: p, build: build, started: started, port: port}
}

// stop reads the replica's count of non-determinism failures, then stops it as systemd does.
func (r *replicaProc) stop() {
	r.t.Helper()
	r.ndeMetric = r.sdkCounter("temporal_workflow_task_execution_failed_total", "failure_reason", "NonDeterminismError")
	_, err := r.proc.stop(60 * time.Second)
	require.NoError(r.t, err)
}

// sdkCounter is a counter on the replica's /metrics with the given label value (0 when absent:
// the SDK registers a series when it first counts).
func (r *replicaProc) sdkCounter(name, label, value string) float64 {
	r.t.Helper()
	x, err := scrape(r.port)
	require.NoError(r.t, err, "%s /metrics", r.name)
	return x.sum(name, label, value)
}

// waitCurrent waits until rep's worker polls and, with worker versioning, until build is the
// current version of the test's worker deployment; it returns how long after rep's start.
func (e *env) waitCurrent(rep *replicaProc, build string) time.Duration {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		b, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, rep.name+".log"))
		return err == nil && strings.Contains(string(b), "worker polling")
	}, 60*time.Second, 100*time.Millisecond, "%s never polled", rep.name)
	if !e.cfg.Temporal.WorkerVersioning {
		return time.Since(rep.started)
	}
	h := e.client.WorkerDeploymentClient().GetHandle(service.DeploymentName(e.cfg.Temporal.TaskQueue))
	require.Eventually(e.t, func() bool {
		d, err := h.Describe(context.Background(), client.WorkerDeploymentDescribeOptions{})
		cur := d.Info.RoutingConfig.CurrentVersion
		return err == nil && cur != nil && cur.BuildID == build
	}, 60*time.Second, 100*time.Millisecond, "build %s never became current", build)
	return time.Since(rep.started)
}

// waitNoneRunning waits until no host run on the test's task queue is open.
func (e *env) waitNoneRunning() {
	e.t.Helper()
	q := hostruns.HostsQuery{TaskQueue: e.cfg.Temporal.TaskQueue, Running: true}.String()
	require.Eventually(e.t, func() bool {
		resp, err := e.client.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		return err == nil && resp.GetCount() == 0
	}, 60*time.Second, 500*time.Millisecond, "host runs still open")
}

// upgradeReport is what the histories of every run on the test's task queue say about the upgrade.
type upgradeReport struct {
	runs, events, taskFailures, nde  int
	oldOnly, mixed, newOnly, newStep int
	mixedDeferred, oldAfterNew       int
	oldActivitiesAfterNew            int // steps the new build scheduled that a replica of the old one ran
	ndeRuns, oldAfterNewRuns         []string
	timers                           map[string]int    // durable timers per workflow ID
	builds                           map[string]string // the build of each replica's process ID
}

func (e *env) upgradeReport(procs []*replicaProc, oldBuild, newBuild string) upgradeReport {
	e.t.Helper()
	r := upgradeReport{timers: map[string]int{}, builds: map[string]string{}}
	for _, p := range procs {
		r.builds[fmt.Sprint(p.cmd.Process.Pid)] = p.build
	}
	var token []byte
	for {
		resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: hostruns.HostsQuery{TaskQueue: e.cfg.Temporal.TaskQueue}.String(), PageSize: 1000, NextPageToken: token})
		require.NoError(e.t, err)
		for _, ex := range resp.Executions {
			r.add(ex.GetExecution().GetWorkflowId(), e.runHistory(ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId()), oldBuild, newBuild)
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return r
		}
	}
}

// add counts one run: which builds completed its workflow tasks, in order, its failed tasks,
// whether it took the new build's step, its durable timers.
func (r *upgradeReport) add(workflowID string, events []*historypb.HistoryEvent, oldBuild, newBuild string) {
	r.runs++
	r.events += len(events)
	sawOld, sawNew, deferredOld := false, false, false
	taskBuild, scheduledBy := map[int64]string{}, map[int64]string{} // by event ID
	for _, ev := range events {
		if f := ev.GetWorkflowTaskFailedEventAttributes(); f != nil {
			r.taskFailures++
			if f.GetCause() == enumspb.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR {
				r.nde++
				r.ndeRuns = append(r.ndeRuns, workflowID+": "+f.GetFailure().GetMessage())
			}
		}
		// the workflow itself has no GetVersion: a version marker is the new build's change
		if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "Version" {
			r.newStep++
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduledBy[ev.GetEventId()] = taskBuild[a.GetWorkflowTaskCompletedEventId()]
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && scheduledBy[a.GetScheduledEventId()] == newBuild {
			if pid, _, _ := strings.Cut(a.GetIdentity(), "@"); r.builds[pid] == oldBuild {
				r.oldActivitiesAfterNew++
			}
		}
		if ev.GetTimerStartedEventAttributes() != nil {
			r.timers[workflowID]++
			deferredOld = deferredOld || (sawOld && !sawNew)
		}
		c := ev.GetWorkflowTaskCompletedEventAttributes()
		if c == nil {
			continue
		}
		// by the worker's identity (pid@host@queue), which an unversioned worker has too
		pid, _, _ := strings.Cut(c.GetIdentity(), "@")
		taskBuild[ev.GetEventId()] = r.builds[pid]
		switch r.builds[pid] {
		case oldBuild:
			if sawNew {
				r.oldAfterNew++
				r.oldAfterNewRuns = append(r.oldAfterNewRuns, workflowID)
			}
			sawOld = true
		case newBuild:
			sawNew = true
		}
	}
	switch {
	case sawOld && sawNew:
		r.mixed++
		if deferredOld {
			r.mixedDeferred++
		}
	case sawNew:
		r.newOnly++
	default:
		r.oldOnly++
	}
}
