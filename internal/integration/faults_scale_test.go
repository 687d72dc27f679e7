package integration

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/workflows"
)

// kill -9 of the provisioner with hundreds of simulated hosts in flight, then a new process:
// every host provisioned, none twice. Minutes long, so it runs from `make test-faults-scale`
// (FAULTS_SCALE=1), a nightly-style target whose last results are in docs/reliability.md.
func TestIntegrationFaultScaleKillWorker(t *testing.T) {
	scaleOnly(t)
	const hosts = 500
	e := newEnv(t, envOptions{servers: 0})
	status := e.startFleetSim(hosts, "--prefix", "scale-")
	first := e.processProvisioner("replica-a")
	require.Eventually(t, func() bool {
		return simCount(status(), func(h fleetsim.HostState) bool { return h.Configured }) >= hosts/10
	}, 120*time.Second, 200*time.Millisecond)
	require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGKILL))
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
	scaleOnly(t)
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

// scaleOnly keeps the minutes-long scale scenarios to make test-faults-scale (FAULTS_SCALE=1).
func scaleOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("FAULTS_SCALE") == "" {
		t.Skip("scale fault scenario: run make test-faults-scale (results in docs/reliability.md)")
	}
}
