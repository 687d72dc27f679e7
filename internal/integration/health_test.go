package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/health"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// healthReplica runs a provisioner replica in this process with health_port on a free port of
// 127.0.0.1, and returns its health base URL (the stack's own configuration turns health off).
func (e *env) healthReplica(name string) string {
	e.t.Helper()
	port, err := devstack.FreePort()
	require.NoError(e.t, err)
	cfg := *e.cfg
	cfg.HealthPort, cfg.HealthAddress = port, "127.0.0.1"
	log, err := logging.New("info", filepath.Join(e.stack.Opts.Dir, name+".log"))
	require.NoError(e.t, err)
	svc, err := service.New(&cfg, log.With(zap.String("replica", name)),
		service.Options{Worker: true, Discovery: true, Registry: prometheus.NewRegistry()})
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, nil) }()
	e.t.Cleanup(func() { cancel(); require.NoError(e.t, <-done) })
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// probe is one GET of a health path: its status code and report (zero when it did not answer).
func probe(url string) (int, health.Report) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, health.Report{}
	}
	defer resp.Body.Close()
	var r health.Report
	if json.NewDecoder(resp.Body).Decode(&r) != nil {
		return -1, health.Report{}
	}
	return resp.StatusCode, r
}

// waitProbe waits until url answers code with the component in state.
func (e *env) waitProbe(url string, code int, component string, state health.State, within time.Duration) health.Report {
	e.t.Helper()
	var last health.Report
	var lastCode int
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		lastCode, last = probe(url)
		if lastCode == code && last.Components[component].State == state {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Fatalf("%s never answered %d with %s %s within %v: last %d %+v", url, code, component, state, within, lastCode, last)
	return last
}

// /readyz is 200 only while the worker polls Temporal, the broker connection is up and discovery
// runs; /healthz stays 200 through an outage of either (restarting the process would not help).
// The replica is ready again after each, and provisions.
func TestIntegrationHealthFollowsBrokerAndTemporal(t *testing.T) {
	e := newEnv(t, envOptions{ownTemporal: true, persist: true, servers: 1})
	base := e.healthReplica("replica-a")
	ready, live := base+health.ReadyPath, base+health.LivePath

	r := e.waitProbe(ready, http.StatusOK, health.Broker, health.Up, 60*time.Second)
	for _, c := range []string{health.Temporal, health.Broker, health.Discovery} {
		require.Equal(t, health.Up, r.Components[c].State, "%s: %+v", c, r)
		require.False(t, r.Components[c].Since.IsZero(), c)
	}
	code, _ := probe(live)
	require.Equal(t, http.StatusOK, code)
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members...)

	// the broker goes away for 15 s
	restarted := make(chan error, 1)
	began := time.Now()
	go func() { restarted <- e.stack.RestartBroker(15 * time.Second) }()
	r = e.waitProbe(ready, http.StatusServiceUnavailable, health.Broker, health.Down, 14*time.Second)
	t.Logf("HEALTH broker down: not ready after %v: %s", time.Since(began).Round(100*time.Millisecond), r.Components[health.Broker].Detail)
	require.Equal(t, health.Up, r.Components[health.Temporal].State, "Temporal is not the broker: %+v", r)
	code, _ = probe(live)
	require.Equal(t, http.StatusOK, code, "alive while the broker is down")
	require.NoError(t, <-restarted)
	back := time.Now()
	e.waitProbe(ready, http.StatusOK, health.Broker, health.Up, 60*time.Second)
	t.Logf("HEALTH broker back: ready %v after its restart", time.Since(back).Round(100*time.Millisecond))

	// Temporal goes away for 15 s
	restarted = make(chan error, 1)
	began = time.Now()
	go func() { restarted <- e.stack.RestartTemporal(context.Background(), 15*time.Second) }()
	r = e.waitProbe(ready, http.StatusServiceUnavailable, health.Temporal, health.Down, 14*time.Second)
	t.Logf("HEALTH Temporal down: not ready after %v: %s", time.Since(began).Round(100*time.Millisecond), r.Components[health.Temporal].Detail)
	code, _ = probe(live)
	require.Equal(t, http.StatusOK, code, "alive while Temporal is down")
	require.NoError(t, <-restarted)
	back = time.Now()
	e.waitProbe(ready, http.StatusOK, health.Temporal, health.Up, 90*time.Second)
	t.Logf("HEALTH Temporal back: ready %v after its restart", time.Since(back).Round(100*time.Millisecond))
}

// deferred_nodes counts the hosts the helper deferred among waiting_nodes, so that
// ProvisionerNoProgress can leave out hosts that wait by design.
func TestIntegrationDeferredNodesGauge(t *testing.T) {
	var deferred string
	e := newEnv(t, envOptions{servers: 2, helper: func(s *devstack.Stack) string {
		deferred = s.Fleet.Identity(1)
		return cmdbDeferHelper(t, s, deferred)
	}})
	e.cfg.DeferDelayDuration = 10 * time.Minute // the deferred host's run stays open
	svc := e.provisioner("replica-a")
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members[0])
	e.waitOutcome(deferred, workflows.OutcomeDeferred)
	gauge := func(g *prometheus.GaugeVec) float64 { return testutil.ToFloat64(g.WithLabelValues("dev")) }
	require.Eventually(t, func() bool { return gauge(svc.Metrics.DeferredNodes) == 1 && gauge(svc.Metrics.WaitingNodes) == 1 },
		40*time.Second, 500*time.Millisecond, "one host waits, and it is the deferred one")
}
