package integration

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/fleetsim"
)

// kill -9 of the provisioner with hundreds of simulated hosts in flight, then a new process:
// every host provisioned, none twice. Minutes long, so it runs from `make test-faults-scale`
// (FAULTS_SCALE=1), a nightly-style target whose last results are in docs/reliability.md.
func TestIntegrationFaultScaleKillWorker(t *testing.T) {
	if os.Getenv("FAULTS_SCALE") == "" {
		t.Skip("scale fault scenario: run make test-faults-scale (results in docs/reliability.md)")
	}
	const hosts = 500
	e := newEnv(t, envOptions{servers: 0})
	status := e.startFleetSim(hosts, "--prefix", "scale-")
	first := e.processProvisioner("replica-a")
	require.Eventually(t, func() bool {
		n := 0
		for _, h := range status().Hosts {
			if h.Configured {
				n++
			}
		}
		return n >= hosts/10
	}, 120*time.Second, 200*time.Millisecond)
	require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGKILL))
	killed := time.Now()
	e.processProvisioner("replica-b")

	var st fleetsim.Status
	require.Eventually(t, func() bool {
		st = status()
		n := 0
		for _, h := range st.Hosts {
			if h.Restarted {
				n++
			}
		}
		return n == hosts
	}, 10*time.Minute, time.Second)
	recovered := time.Since(killed)
	twice := 0
	for id := range st.Hosts {
		e.runs(id, 1)
		if c := countScheduled(e, id, "Configure"); c != 1 {
			twice++
		}
	}
	t.Logf("FAULT kill -9 worker with %d simulated hosts: provisioned %d, lost 0, provisioned more than once %d, all done %v after the kill",
		hosts, len(st.Hosts), twice, recovered.Round(time.Second))
	require.Zero(t, twice)
}

func countScheduled(e *env, identity, activity string) int {
	n := 0
	for _, a := range scheduled(e.history(identity)) {
		if a == activity {
			n++
		}
	}
	return n
}
