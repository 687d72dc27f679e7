package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/devstack"
	"github.com/choria-temporal/provisioner/internal/fleetsim"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/workflows"
)

// The production shape (docs/deployment.md): a Temporal server (frontend, history, matching and
// worker services) persisting to PostgreSQL, two provisioner processes as workers, a simulated
// fleet; one provisioner is killed with SIGKILL mid-run and started again. Every host must be
// provisioned, none configured twice. 200 hosts in make test, 1,000 with FAULTS_SCALE=1.
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
	killedCPU := groupCPU(first.Process.Pid)
	require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGKILL))
	killed := time.Now()
	atKill := simCount(status(), func(h fleetsim.HostState) bool { return h.Restarted })
	third := e.processProvisioner("replica-a-again")

	st := waitSimDone(status, hosts, 10*time.Minute)
	done := time.Now()
	cpu := map[string]time.Duration{"temporal-server": groupCPU(srv.PID()), "postgres": groupCPU(srv.Postgres.PID()),
		"provisioners": killedCPU + groupCPU(second.Process.Pid) + groupCPU(third.Process.Pid)}
	restarted := simCount(st, func(h fleetsim.HostState) bool { return h.Restarted })
	twice := simCount(st, func(h fleetsim.HostState) bool { return h.Configures > 1 })
	lost := hosts - restarted
	extra := 0
	if lost == 0 {
		for _, n := range e.runCounts() {
			extra += n - 1
		}
	}
	t.Logf("FAULT Temporal on PostgreSQL, two provisioner processes, kill -9 of one after %d of %d simulated hosts were done: provisioned %d, lost %d, provisioned more than once %d, all done %v after the kill, %v in all (%.1f hosts/s); stale-sighting runs %d",
		atKill, hosts, restarted, lost, twice, done.Sub(killed).Round(100*time.Millisecond), done.Sub(start).Round(100*time.Millisecond),
		float64(hosts)/done.Sub(start).Seconds(), extra)
	t.Logf("CPU (user+system) per host: temporal-server %v, postgres %v, provisioners %v (totals %v)",
		cpu["temporal-server"]/time.Duration(hosts), cpu["postgres"]/time.Duration(hosts), cpu["provisioners"]/time.Duration(hosts), cpu)
	require.Zero(t, lost, "hosts lost (temporal-server log: %s)", filepath.Join(srv.Opts.Dir, "temporal-server.log"))
	require.Zero(t, twice, "hosts configured more than once")
	for id, h := range st.Hosts {
		require.Equal(t, "false", h.Provision, id)
		require.True(t, h.ServerJWT, id)
	}
	// every host's workflow is in the PostgreSQL visibility store, found through the provisioner's
	// search attributes (hosts list)
	outcomes := map[string]int{}
	require.Eventually(t, func() bool {
		l, err := e.operator().List(context.Background(), operator.Filter{})
		if err != nil || len(l) != hosts {
			return false
		}
		clear(outcomes)
		for _, h := range l {
			outcomes[h.Outcome]++
		}
		return outcomes[workflows.OutcomeRunning] == 0
	}, 2*time.Minute, time.Second, "hosts list does not show every host closed")
	t.Logf("latest run of each host by outcome: %v", outcomes)
	require.NotZero(t, outcomes[workflows.OutcomeProvisioned])
}

// startSQLTemporal starts PostgreSQL and a Temporal server on it for one test. Without the
// PostgreSQL binaries the test is skipped, except in CI (CI set), where make deps installs them.
func startSQLTemporal(t *testing.T) *devstack.SQLTemporal {
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
	srv, err := devstack.StartSQLTemporal(context.Background(), devstack.SQLTemporalOptions{
		Dir: t.TempDir(), ServerBin: server, SQLToolBin: sqlTool, PostgresBin: pg, Retention: 24 * time.Hour})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	t.Logf("PostgreSQL (%s) and temporal-server ready in %v, frontend %s", pg, time.Since(began).Round(100*time.Millisecond), srv.Address)
	return srv
}

func simCount(st fleetsim.Status, f func(fleetsim.HostState) bool) int {
	n := 0
	for _, h := range st.Hosts {
		if f(h) {
			n++
		}
	}
	return n
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

// groupCPU is the user and system CPU time of a process group's live processes and their
// reaped children, from /proc (clock ticks of 10 ms).
func groupCPU(pgid int) time.Duration {
	if pgid == 0 {
		return 0
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		// after "pid (comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 15 || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		for _, v := range fields[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
