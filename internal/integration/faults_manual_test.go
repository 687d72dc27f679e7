package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/choria-temporal/provisioner/internal/dev/faultproxy"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/workflows"
)

// Fault scenarios run by hand, one command each, outside make test (minutes long, or root for a
// tmpfs); results in docs/reliability.md.

// byHand skips a scenario unless its variable is set, as its make target sets it.
func byHand(t *testing.T, env, target string) {
	t.Helper()
	if os.Getenv(env) == "" {
		t.Skipf("run by hand: make %s (%s=1)", target, env)
	}
}

// Slow links: a burst of FAULTS_SLOW_HOSTS (1,000) simulated hosts with every reply from the
// broker and from Temporal to the provisioner delayed 300 ms ± 200 ms, against the same burst
// without the delay (both through the fault proxies). Reports throughput and latency percentiles.
func TestIntegrationFaultSlowLinks(t *testing.T) {
	byHand(t, "FAULTS_SLOW", "test-faults-slow")
	hosts := envInt(t, "FAULTS_SLOW_HOSTS", 1000)
	latency := envDuration(t, "FAULTS_SLOW_LATENCY", 300*time.Millisecond)
	jitter := envDuration(t, "FAULTS_SLOW_JITTER", 200*time.Millisecond)
	for _, slow := range []bool{false, true} {
		name := "baseline"
		if slow {
			name = fmt.Sprintf("slow %v±%v", latency, jitter)
		}
		t.Run(name, func(t *testing.T) {
			began := time.Now()
			e := newEnv(t, envOptions{faults: true})
			if slow {
				for _, p := range []*faultproxy.Proxy{e.stack.BrokerProxy, e.stack.TemporalProxy} {
					undo, err := p.Slow(faultproxy.Downstream, latency, jitter)
					require.NoError(t, err)
					t.Cleanup(func() { _ = undo() })
				}
			}
			status := e.startFleetSim(hosts, "--prefix", "slow-")
			start := time.Now()
			e.processProvisioner("replica-a")
			r := e.simOutcome("slow-", status, hosts, start, 30*time.Minute)
			r.log(t, fmt.Sprintf("slow links, %s, burst of %d", name, hosts), time.Since(began))
			t.Logf("FAULT slow links, %s: %.2f hosts/s; announce to restart %s", name, float64(r.provisioned)/r.recovered.Seconds(), simLatency(status()))
			r.require(t)
		})
	}
}

// PostgreSQL restarted under load in the production shape: Temporal server on PostgreSQL, two
// provisioner processes, FAULTS_POSTGRES_HOSTS (500) simulated hosts; once a quarter are
// configured PostgreSQL is stopped (fast shutdown: every connection closed), kept down
// FAULTS_POSTGRES_DOWN (10 s) and started again.
func TestIntegrationFaultPostgresRestart(t *testing.T) {
	byHand(t, "FAULTS_POSTGRES", "test-faults-postgres")
	began := time.Now()
	hosts := envInt(t, "FAULTS_POSTGRES_HOSTS", 500)
	down := envDuration(t, "FAULTS_POSTGRES_DOWN", 10*time.Second)
	srv := startSQLTemporal(t)
	e := newEnv(t, envOptions{temporalAddress: srv.Address})
	status := e.startFleetSim(hosts, "--prefix", "pgr-")
	e.processProvisioner("replica-a")
	e.processProvisioner("replica-b")
	e.simWait(status, hosts/4, 5*time.Minute, "configured", configured)
	atStop := simCount(status(), configured)
	stopped := time.Now()
	require.NoError(t, srv.Postgres.Restart(context.Background(), down))
	back := time.Now()
	t.Logf("PostgreSQL stopped with %d of %d configured, accepting connections again after %v", atStop, hosts, back.Sub(stopped).Round(100*time.Millisecond))
	r := e.simOutcome("pgr-", status, hosts, back, 20*time.Minute)
	r.log(t, fmt.Sprintf("PostgreSQL restarted (%v down) under load, production shape, %d simulated hosts (recovery from its return)", down, hosts), time.Since(began))
	t.Logf("temporal-server log: %s", filepath.Join(srv.Opts.Dir, "temporal-server.log"))
	r.require(t)
}

// kill -9 of the provisioner with hundreds of simulated hosts in flight, then a new process:
// every host provisioned, none twice. Minutes long, so it runs from `make test-faults-scale`
// (FAULTS_SCALE=1), a nightly-style target whose last results are in docs/reliability.md.
func TestIntegrationFaultScaleKillWorker(t *testing.T) {
	byHand(t, "FAULTS_SCALE", "test-faults-scale")
	const hosts = 500
	e := newEnv(t, envOptions{servers: 0})
	status := e.startFleetSim(hosts, "--prefix", "scale-")
	first := e.processProvisioner("replica-a")
	require.Eventually(t, func() bool {
		return simCount(status(), func(h fleetsim.HostState) bool { return h.Configured }) >= hosts/10
	}, 120*time.Second, 200*time.Millisecond)
	require.NoError(t, first.kill())
	killed := time.Now()
	e.processProvisioner("replica-b")

	st := waitSimRestarted(t, status, hosts, 10*time.Minute)
	recovered := time.Since(killed)
	twice := e.simTally(st)
	t.Logf("FAULT kill -9 worker with %d simulated hosts: provisioned %d, lost 0, provisioned more than once %d, all done %v after the kill",
		hosts, len(st.Hosts), twice, recovered.Round(time.Second))
	require.Zero(t, twice)
}

// Two provisioner processes active/active on 1,000 simulated hosts: each host provisioned once.
func TestIntegrationFaultScaleTwoReplicas(t *testing.T) {
	byHand(t, "FAULTS_SCALE", "test-faults-scale")
	const hosts = 1000
	e := newEnv(t, envOptions{servers: 0})
	status := e.startFleetSim(hosts, "--prefix", "pair-")
	start := time.Now()
	e.processProvisioner("replica-a")
	e.processProvisioner("replica-b")
	st := waitSimRestarted(t, status, hosts, 15*time.Minute)
	took := time.Since(start)
	twice := e.simTally(st)
	t.Logf("FAULT two replicas active/active on %d simulated hosts: provisioned %d, lost 0, provisioned more than once %d, in %v (%.1f hosts/s)",
		hosts, len(st.Hosts), twice, took.Round(time.Second), float64(hosts)/took.Seconds())
	require.Zero(t, twice)
}

// waitSimRestarted waits until all n simulated hosts restarted out of provisioning mode.
func waitSimRestarted(t *testing.T, status func() fleetsim.Status, n int, timeout time.Duration) fleetsim.Status {
	t.Helper()
	var st fleetsim.Status
	require.Eventually(t, func() bool {
		st = status()
		return simCount(st, func(h fleetsim.HostState) bool { return h.Restarted }) == n
	}, timeout, time.Second)
	return st
}

// simCount counts the simulated hosts for which f holds.
func simCount(st fleetsim.Status, f func(fleetsim.HostState) bool) int {
	n := 0
	for _, h := range st.Hosts {
		if f(h) {
			n++
		}
	}
	return n
}

// simTally returns how many simulated hosts were configured other than exactly once, and logs
// the stale-sighting runs (runs started after a host's run closed; none configures).
func (e *env) simTally(st fleetsim.Status) int {
	e.t.Helper()
	twice, extra := 0, 0
	runs := e.runCounts()
	for id, h := range st.Hosts {
		if h.Configures != 1 {
			twice++
		}
		extra += runs[workflows.WorkflowID(id)] - 1
	}
	e.t.Logf("stale-sighting runs (started after a host's run closed; none configures): %d", extra)
	return twice
}

// runCounts lists every run on the test's task queue in pages (one visibility query per 1,000
// runs: visibility calls are rate-limited per namespace) and counts runs per workflow ID.
func (e *env) runCounts() map[string]int {
	e.t.Helper()
	counts := map[string]int{}
	var token []byte
	for {
		resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "TaskQueue = '" + e.cfg.Temporal.TaskQueue + "' AND WorkflowType = 'ProvisionHost'", PageSize: 1000, NextPageToken: token})
		require.NoError(e.t, err)
		for _, ex := range resp.Executions {
			counts[ex.GetExecution().GetWorkflowId()]++
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return counts
		}
	}
}

// The dev server's disk full (make test-faults-disk; needs root to mount a tmpfs): its SQLite
// file on a tmpfs of FAULTS_DISK_SIZE (256m), a burst of FAULTS_DISK_HOSTS (500) simulated hosts;
// once a quarter are configured the rest of the tmpfs is filled for FAULTS_DISK_FULL (30 s), then
// the filler is removed. Reports what was configured while the disk was full and the recovery
// from the moment space returned.
func TestIntegrationFaultDiskFull(t *testing.T) {
	byHand(t, "FAULTS_DISK", "test-faults-disk")
	began := time.Now()
	hosts := envInt(t, "FAULTS_DISK_HOSTS", 500)
	full := envDuration(t, "FAULTS_DISK_FULL", 30*time.Second)
	size := os.Getenv("FAULTS_DISK_SIZE")
	if size == "" {
		size = "256m"
	}
	disk := mountTmpfs(t, size)
	e := newEnv(t, envOptions{ownTemporal: true, persist: true, dbFile: filepath.Join(disk, "temporal.db")})
	status := e.startFleetSim(hosts, "--prefix", "disk-")
	e.processProvisioner("replica-a")
	e.simWait(status, hosts/4, 5*time.Minute, "configured", configured)

	atFull := simCount(status(), configured)
	filler, filled := fillDisk(t, disk)
	t.Logf("disk full with %d of %d configured (%d MiB of filler)", atFull, hosts, filled>>20)
	time.Sleep(full)
	whileFull := simCount(status(), configured) - atFull
	require.NoError(t, os.Remove(filler))
	back := time.Now()
	t.Logf("space back after %v: %d hosts were configured while the disk was full; the provisioner's warnings and errors so far: %v",
		full, whileFull, e.logMessages("replica-a", `"level":"warn"`, `"level":"error"`))
	r := e.simOutcome("disk-", status, hosts, back, 20*time.Minute)
	r.log(t, fmt.Sprintf("dev server's disk full for %v under load, %d simulated hosts (recovery from when space returned)", full, hosts), time.Since(began))
	r.require(t)
}

// mountTmpfs mounts a tmpfs of size on a directory of the test's own, unmounted at its end
// (after the stack's cleanup, which was registered later).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "mounting a tmpfs (the full-disk scenario needs root): %s", out)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file into dir until the filesystem has no space left, and returns its path
// and size.
func fillDisk(t *testing.T, dir string) (string, int64) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return path, n
		}
		require.NoError(t, err, "filling %s", dir)
	}
}

// logMessages counts a replica's log lines of each level given by message.
func (e *env) logMessages(replica string, levels ...string) map[string]int {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, replica+".log"))
	require.NoError(e.t, err)
	out := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		var line struct {
			Msg string `json:"msg"`
		}
		for _, lv := range levels {
			if strings.Contains(l, lv) && json.Unmarshal([]byte(l), &line) == nil {
				out[line.Msg]++
			}
		}
	}
	return out
}
