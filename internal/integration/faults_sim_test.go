package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/workflows"
)

// simFault is what a fault scenario on simulated hosts found.
type simFault struct {
	hosts, provisioned, lost int
	// twice: configured with different credentials, or by two steps or runs (must be 0);
	// redelivered: the same Configure step delivered again with the same input (harmless,
	// docs/reliability.md)
	twice, redelivered int
	failed             int     // provisioned hosts whose latest run says failed (what `hosts list` shows)
	runsPerHost        float64 // every run of the hosts / hosts
	recovered          time.Duration
}

// simOutcome waits up to timeout for the n simulated hosts whose identities start with prefix to
// restart out of provisioning mode, then for their runs to close, and counts what happened to
// them; recovered is from since to the last host done.
func (e *env) simOutcome(prefix string, status func() fleetsim.Status, n int, since time.Time, timeout time.Duration) simFault {
	e.t.Helper()
	st := e.waitSimDone(status, n, timeout)
	r := simFault{hosts: n, recovered: time.Since(since)}
	var latest time.Time
	for id, h := range st.Hosts {
		if !h.Restarted {
			continue
		}
		r.provisioned++
		if h.RestartedAt.After(latest) {
			latest = h.RestartedAt
		}
		if h.Configures <= 1 {
			continue
		}
		configures, _ := e.explainHost(id, h)
		if h.Credentials > 1 || configures > 1 {
			r.twice++
		} else {
			r.redelivered++
		}
	}
	r.lost = n - r.provisioned
	if r.lost == 0 && !latest.IsZero() {
		r.recovered = latest.Sub(since)
	}
	hosts := e.closedHosts(prefix, 3*time.Minute)
	for _, h := range hosts {
		if h.Outcome == workflows.OutcomeFailed {
			r.failed++
			e.t.Logf("%s: latest run failed at %s after %d runs: %s", h.Identity, h.Step, h.Runs, h.Reason)
			if h.Runs > 1 {
				e.explainHost(h.Identity, st.Hosts[h.Identity])
			}
		}
	}
	runs := 0
	for id, c := range e.runCounts() {
		if strings.HasPrefix(id, workflows.WorkflowID(prefix)) {
			runs += c
		}
	}
	r.runsPerHost = float64(runs) / float64(n)
	return r
}

// closedHosts waits until no host with the prefix has an open run and returns them all.
func (e *env) closedHosts(prefix string, timeout time.Duration) []operator.Host {
	e.t.Helper()
	var mine []operator.Host
	open := 0
	require.Eventually(e.t, func() bool {
		l, err := e.operator().List(context.Background(), operator.Filter{})
		if err != nil {
			return false
		}
		mine, open = mine[:0], 0
		for _, h := range l {
			if strings.HasPrefix(h.Identity, prefix) {
				mine = append(mine, h)
				if h.Outcome == workflows.OutcomeRunning {
					open++
				}
			}
		}
		return open == 0
	}, timeout, time.Second, "runs of %s hosts still open", prefix)
	return mine
}

// log writes the scenario's FAULT line (make test-faults shows these).
func (r simFault) log(t *testing.T, scenario string, took time.Duration) {
	t.Helper()
	t.Logf("FAULT %s: hosts %d, provisioned %d, lost %d, configured twice %d (the same step redelivered %d), runs/host %.3f, latest run failed %d, recovered in %v; test %v",
		scenario, r.hosts, r.provisioned, r.lost, r.twice, r.redelivered, r.runsPerHost, r.failed, r.recovered.Round(100*time.Millisecond), took.Round(time.Second))
}

// require holds every scenario to its bar: no host lost, none configured twice, and no
// provisioned host whose latest run says failed (what `hosts list --outcome failed` would show).
func (r simFault) require(t *testing.T) {
	t.Helper()
	require.Zero(t, r.lost, "hosts lost: never restarted out of provisioning mode")
	require.Zero(t, r.twice, "hosts configured twice: with different credentials, or by two steps or runs")
	require.Zero(t, r.failed, "provisioned hosts whose latest run failed (their reasons are logged above)")
}

// envInt is an integer from the environment (a scenario's full size), else def (its size in make test).
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	return envValue(t, name, def, strconv.Atoi)
}

// envDuration is envInt for durations.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	return envValue(t, name, def, time.ParseDuration)
}

// envValue is the environment's value of name as parse reads it, else def.
func envValue[T any](t *testing.T, name string, def T, parse func(string) (T, error)) T {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := parse(v)
	require.NoError(t, err, "%s=%q", name, v)
	return n
}

// simWait waits until at least n simulated hosts satisfy f; a simulator that exited ends it at once.
func (e *env) simWait(status func() fleetsim.Status, n int, timeout time.Duration, what string, f func(fleetsim.HostState) bool) {
	e.t.Helper()
	var st fleetsim.Status
	ok := assert.Eventually(e.t, func() bool {
		st = status()
		return e.simErr.Load() != nil || simCount(st, f) >= n
	}, timeout, 100*time.Millisecond, "%d hosts %s", n, what)
	e.requireSimAlive()
	if !ok {
		e.t.Fatalf("waiting for %d hosts %s: %s", n, what, simSummary(st))
	}
}

// waitSimDone is the package's waitSimDone, ended at once by a simulator that exited.
func (e *env) waitSimDone(status func() fleetsim.Status, n int, timeout time.Duration) fleetsim.Status {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := status()
		e.requireSimAlive()
		if simCount(st, func(h fleetsim.HostState) bool { return h.Restarted }) == n || time.Now().After(deadline) {
			return st
		}
		time.Sleep(time.Second)
	}
}

func (e *env) requireSimAlive() {
	e.t.Helper()
	if why := e.simErr.Load(); why != nil {
		e.t.Fatal(*why)
	}
}

// simSummary counts the simulated hosts in each state.
func simSummary(st fleetsim.Status) string {
	c := map[string]int{}
	for _, h := range st.Hosts {
		switch {
		case h.Restarted:
			c["restarted"]++
		case h.Restarting:
			c["restarting"]++
		case h.Configured:
			c["configured"]++
		default:
			c["waiting"]++
		}
	}
	return fmt.Sprintf("%d hosts in the status file: %v", len(st.Hosts), c)
}

// sleepUntil sleeps until at.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

func configured(h fleetsim.HostState) bool { return h.Configured }
