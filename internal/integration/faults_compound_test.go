package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/dev/faultproxy"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
)

// Fault scenarios on simulated hosts (issue 27), in make test at sizes that fit CI and at full
// size with the environment variables each names (make test-faults-full). Each logs a FAULT line:
// hosts lost, configured twice, runs per host, recovery time (docs/reliability.md).

// Compound: during a burst, kill -9 of one of two provisioner processes, a broker restart and a
// Temporal restart (SQLite file) inside one minute; the killed process comes back after the last.
func TestIntegrationFaultCompound(t *testing.T) {
	began := time.Now()
	hosts := envInt(t, "FAULTS_COMPOUND_HOSTS", 500)
	e := newEnv(t, envOptions{ownTemporal: true, persist: true})
	status := e.startFleetSim(hosts, "--prefix", "cmp-")
	a := e.processProvisioner("replica-a")
	e.processProvisioner("replica-b")
	e.simWait(status, hosts/10, 5*time.Minute, "configured", configured)

	first := time.Now()
	require.NoError(t, a.kill())
	atKill := simCount(status(), configured)
	sleepUntil(first.Add(5 * time.Second))
	require.NoError(t, e.stack.RestartBroker(2*time.Second))
	sleepUntil(first.Add(12 * time.Second))
	require.NoError(t, e.stack.RestartTemporal(context.Background(), 2*time.Second))
	last := time.Now()
	doneAtLast := simCount(status(), func(h fleetsim.HostState) bool { return h.Restarted })
	e.processProvisioner("replica-a-again")
	t.Logf("faults: kill -9 of replica-a with %d of %d configured, broker restart (2 s down) at +5s, Temporal restart (2 s down) at +12s, back at +%v with %d hosts done",
		atKill, hosts, last.Sub(first).Round(100*time.Millisecond), doneAtLast)
	require.Less(t, doneAtLast, hosts, "every fault must meet hosts in flight (FAULTS_COMPOUND_HOSTS larger)")

	r := e.simOutcome("cmp-", status, hosts, first, 20*time.Minute)
	r.log(t, fmt.Sprintf("compound (kill -9 of one of two workers, broker restart, Temporal restart within %v) on %d simulated hosts", last.Sub(first).Round(time.Second), hosts), time.Since(began))
	t.Logf("FAULT compound: all done %v after the last fault", (r.recovered - last.Sub(first)).Round(100*time.Millisecond))
	r.require(t)
}

// Partitions between the provisioner and the broker (both ways; one way: requests arrive,
// replies are held) and between the provisioner and Temporal, each for FAULTS_PARTITION_CUT
// (30 s) while a burst of hosts is being provisioned. Each partition has a stack, a burst and a
// provisioner of its own, so the three run side by side: they spend their time waiting out the
// cut and the recovery, not working.
func TestIntegrationFaultPartitions(t *testing.T) {
	began := time.Now()
	hosts := envInt(t, "FAULTS_PARTITION_HOSTS", 60)
	cut := envDuration(t, "FAULTS_PARTITION_CUT", 30*time.Second)
	for i, ph := range []struct {
		name     string
		temporal bool // the link to Temporal, else the one to the broker
		dir      faultproxy.Direction
	}{
		{"provisioner-broker cut both ways", false, faultproxy.Both},
		{"provisioner-broker cut one way (requests arrive, replies held)", false, faultproxy.Downstream},
		{"provisioner-Temporal cut both ways", true, faultproxy.Both},
	} {
		t.Run(fmt.Sprintf("cut%d", i), func(t *testing.T) {
			t.Parallel()
			phase := time.Now()
			e := newEnv(t, envOptions{faults: true})
			e.provisioner("replica-a")
			prefix := fmt.Sprintf("cut%d-", i)
			status := e.startFleetSimAs(prefix+"sim", hosts, "--prefix", prefix)
			e.simWait(status, hosts/5, 3*time.Minute, "configured", configured)
			proxy := e.stack.BrokerProxy
			if ph.temporal {
				proxy = e.stack.TemporalProxy
			}
			heal, err := proxy.Cut(ph.dir)
			require.NoError(t, err)
			atCut := simCount(status(), configured)
			time.Sleep(cut)
			require.NoError(t, heal())
			healed := time.Now()
			r := e.simOutcome(prefix, status, hosts, healed, 5*time.Minute)
			r.log(t, fmt.Sprintf("%s for %v, cut with %d of %d configured (recovery from the heal)", ph.name, cut, atCut, hosts), time.Since(phase))
			r.require(t)
		})
	}
	t.Cleanup(func() { t.Logf("partitions: test %v", time.Since(began).Round(time.Second)) })
}

// Kill during restart: the simulator holds each restart reply 5 s after it scheduled the
// restart, and one of two provisioner processes is killed while many hosts are in that window.
// The retried restart gets no reply (the server is already restarting), yet every host did
// leave provisioning mode configured once: its run must end provisioned, never failed.
func TestIntegrationFaultKillDuringRestart(t *testing.T) {
	began := time.Now()
	hosts := envInt(t, "FAULTS_RESTART_HOSTS", 100)
	e := newEnv(t, envOptions{})
	status := e.startFleetSim(hosts, "--prefix", "rst-", "--reply-delay", "restart=5s")
	killed, inWindow := e.killInWindow(status, hosts, "restarting", func(h fleetsim.HostState) bool { return h.Restarting })

	r := e.simOutcome("rst-", status, hosts, killed, 10*time.Minute)
	r.log(t, fmt.Sprintf("kill -9 during restart (%d of %d hosts restarting, replies held 5 s)", inWindow, hosts), time.Since(began))
	r.require(t)
	require.Zero(t, r.failed, "%d hosts left provisioning mode configured once, but their latest run failed: the restart retry after the kill got no reply "+
		"because the server was already restarting, and the run ended failed instead of provisioned (issue 27 item 5; the workflow change is the lead's)", r.failed)
}

// Fast mode killed after configure: the simulator holds each configure reply 3 s after it wrote
// the configuration, and one of two provisioner processes is killed while many hosts are
// configured and their replies held. No host may be configured again with different
// credentials (a new key and JWT from steps run again).
func TestIntegrationFaultFastModeKillAfterConfigure(t *testing.T) {
	began := time.Now()
	t.Setenv("PROVISIONER_TEMPORAL__FAST_MODE", "true") // the provisioner processes read it too
	hosts := envInt(t, "FAULTS_FAST_HOSTS", 100)
	e := newEnv(t, envOptions{})
	require.True(t, e.cfg.Temporal.FastMode)
	status := e.startFleetSim(hosts, "--prefix", "fast-", "--reply-delay", "configure=3s")
	awaiting := func(h fleetsim.HostState) bool { return h.Configured && !h.Restarting && !h.Restarted }
	killed, inWindow := e.killInWindow(status, hosts, "configured, not restarting", awaiting)

	r := e.simOutcome("fast-", status, hosts, killed, 10*time.Minute)
	r.log(t, fmt.Sprintf("fast mode, kill -9 after configure (%d of %d hosts configured and not restarting, replies held 3 s)", inWindow, hosts), time.Since(began))
	require.Zero(t, r.lost, "hosts lost")
	require.Zero(t, r.twice, "%d hosts were configured twice with different credentials: fast mode ran gen25519, sign and configure again after the kill "+
		"(issue 27 item 6; making configure a regular activity in fast mode is the lead's change)", r.twice)
}

// windowMost bounds how many hosts killInWindow waits for in the window: the window is a few
// seconds of held replies, so at most the rate times that is ever in it (about 25 hosts/s here:
// a tenth of 1,000 hosts, 100, was never reached and make test-faults-full failed waiting).
const windowMost = 50

// killInWindow runs two provisioner processes, waits until a tenth of the hosts (10 at the
// least, windowMost at the most) are in the window, kills one with SIGKILL and starts it again;
// it returns when the kill was and how many hosts were in the window then.
func (e *env) killInWindow(status func() fleetsim.Status, hosts int, what string, in func(fleetsim.HostState) bool) (time.Time, int) {
	e.t.Helper()
	a := e.processProvisioner("replica-a")
	e.processProvisioner("replica-b")
	e.simWait(status, min(max(10, hosts/10), windowMost), 5*time.Minute, what, in)
	require.NoError(e.t, a.kill())
	killed := time.Now()
	inWindow := simCount(status(), in)
	e.processProvisioner("replica-a-again")
	return killed, inWindow
}
