package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/dev/faultproxy"
)

// Fault scenarios run by hand, one command each (Makefile: test-faults-slow,
// test-faults-postgres); results in docs/reliability.md.

// Slow links: a burst of FAULTS_SLOW_HOSTS (1,000) simulated hosts with every reply from the
// broker and from Temporal to the provisioner delayed 300 ms ± 200 ms, against the same burst
// without the delay (both through the fault proxies). Reports throughput and latency percentiles.
func TestIntegrationFaultSlowLinks(t *testing.T) {
	if os.Getenv("FAULTS_SLOW") == "" {
		t.Skip("slow links: make test-faults-slow (FAULTS_SLOW=1)")
	}
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
	if os.Getenv("FAULTS_POSTGRES") == "" {
		t.Skip("PostgreSQL restart: make test-faults-postgres (FAULTS_POSTGRES=1)")
	}
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
