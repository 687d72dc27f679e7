package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/faultproxy"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/internal/dev/procstat"
)

// Soak: simulated hosts arrive at 5/s for FAULTS_SOAK (make test-soak SOAK=60m), with a fault
// every FAULTS_SOAK_EVERY (5 m, or a fifth of a shorter soak) in turn: kill -9 of a worker,
// broker restart, Temporal restart, and 30 s partitions to the broker (both ways, replies only)
// and to Temporal (FAULTS_SOAK_ONLY: only the faults whose names contain it). One provisioner process is never killed: its RSS and goroutines are sampled
// every 15 s and their slope reported, with Temporal's and the broker's memory.
// FAULTS_SOAK_SHAPE=postgres soaks the production shape instead (make test-soak SOAK_SHAPE=postgres):
// a Temporal server on PostgreSQL, restarted as a package upgrade would, and PostgreSQL
// restarted in the turn too.
func TestIntegrationFaultSoak(t *testing.T) {
	d := envDuration(t, "FAULTS_SOAK", 0)
	if d == 0 {
		t.Skip("soak: make test-soak SOAK=60m (FAULTS_SOAK)")
	}
	every := envDuration(t, "FAULTS_SOAK_EVERY", min(5*time.Minute, d/5))
	const rate = 5
	hosts := int(rate * d.Seconds())
	temporal := soakTemporalDev()
	if shape := os.Getenv("FAULTS_SOAK_SHAPE"); shape == "postgres" {
		temporal = soakTemporalSQL(t)
	} else {
		require.Empty(t, shape, "FAULTS_SOAK_SHAPE is postgres or unset")
	}
	e := newEnv(t, temporal.env)
	temporal.stack = e.stack
	port, err := devstack.FreePort()
	require.NoError(t, err)
	steady := e.processProvisioner("steady", fmt.Sprintf("PROVISIONER_MONITOR_PORT=%d", port), "PROVISIONER_MONITOR_ADDRESS=127.0.0.1",
		"PROVISIONER_MONITOR_PPROF=true")
	victim := e.processProvisioner("victim-0")
	status := e.startFleetSim(hosts, "--prefix", "soak-", "--rate", strconv.Itoa(rate))
	start := time.Now()

	cut := func(p *faultproxy.Proxy, dir faultproxy.Direction) error {
		heal, err := p.Cut(dir)
		if err == nil {
			time.AfterFunc(30*time.Second, func() { _ = heal() })
		}
		return err
	}
	kills := 0
	faults := []soakFault{
		{"kill -9 of a worker", func() error {
			kills++
			err := victim.kill()
			victim = e.processProvisioner(fmt.Sprintf("victim-%d", kills))
			return err
		}},
		{"broker restart (2 s down)", func() error { return e.stack.RestartBroker(2 * time.Second) }},
		{"Temporal restart (2 s down)", func() error { return temporal.restart(t.Context(), 2*time.Second) }},
		{"provisioner-broker cut both ways 30 s", func() error { return cut(e.stack.BrokerProxy, faultproxy.Both) }},
		{"provisioner-Temporal cut both ways 30 s", func() error { return cut(e.stack.TemporalProxy, faultproxy.Both) }},
		{"provisioner-broker replies held 30 s", func() error { return cut(e.stack.BrokerProxy, faultproxy.Downstream) }},
	}
	if temporal.sql != nil {
		faults = append(faults, soakFault{"PostgreSQL restart (2 s down)", func() error { return temporal.sql.Postgres.Restart(t.Context(), 2*time.Second) }})
	}
	if only := os.Getenv("FAULTS_SOAK_ONLY"); only != "" {
		// one kind of fault, to reproduce what a full soak found (make test-soak SOAK_ONLY=Temporal-cut)
		kept := faults[:0]
		for _, f := range faults {
			if strings.Contains(f.name, only) {
				kept = append(kept, f)
			}
		}
		require.NotEmpty(t, kept, "FAULTS_SOAK_ONLY=%q names none of the faults", only)
		faults = kept
	}
	var samples []soakSample
	var early map[string]int // the steady provisioner's goroutines by stack, after warm-up
	// each fault opens a window; the hosts announced in it show what that fault cost them
	windows := []soakWindow{{at: start, fault: "before the first fault"}}
	next, n := start.Add(every), 0
	for tick := time.NewTicker(15 * time.Second); time.Since(start) < d; <-tick.C {
		samples = append(samples, takeSoakSample(start, port, steady.pid(), temporal.pid()))
		if early == nil && time.Since(start) >= d/10 {
			early = goroutineStacks(port)
		}
		if time.Now().After(next) {
			f := faults[n%len(faults)]
			require.NoError(t, f.do(), f.name)
			t.Logf("soak +%v: %s (%s)", time.Since(start).Round(time.Second), f.name, simSummary(status()))
			windows = append(windows, soakWindow{at: time.Now(), fault: f.name})
			next, n = next.Add(every), n+1
		}
	}
	arrived := time.Now()
	r := e.simOutcome("soak-", status, hosts, arrived, 15*time.Minute)
	r.log(t, fmt.Sprintf("soak %v at %d hosts/s with %d faults (one every %v), %s", d, rate, n, every, temporal.name), time.Since(start))
	final := status()
	t.Logf("FAULT soak: the last host done %v after the last arrival; latency %s", r.recovered.Round(100*time.Millisecond), simLatency(final))
	for i, w := range windows {
		to := arrived
		if i+1 < len(windows) {
			to = windows[i+1].at
		}
		lat := latencies(final, w.at, to)
		t.Logf("FAULT soak: announced +%v to +%v, %s: %d hosts, latency %s", w.at.Sub(start).Round(time.Second), to.Sub(start).Round(time.Second), w.fault,
			len(lat), percentiles(lat))
	}
	logSlopes(t, samples, d/10, temporal.name)
	logGrowth(t, early, goroutineStacks(port))
	r.require(t)
}

// soakFault is one fault of a soak's turn.
type soakFault struct {
	name string
	do   func() error
}

// soakTemporal is the Temporal a soak runs on, and how its faults restart it.
type soakTemporal struct {
	name  string
	env   envOptions
	sql   *devstack.SQLTemporal // the production shape; nil: the stack's own dev server
	stack *devstack.Stack
}

// soakTemporalDev: the stack's own dev server on a SQLite file, so that it survives a restart.
func soakTemporalDev() *soakTemporal {
	return &soakTemporal{name: "Temporal dev server", env: envOptions{ownTemporal: true, persist: true, faults: true}}
}

// soakTemporalSQL: the production shape (docs/deployment.md), a Temporal server on PostgreSQL.
func soakTemporalSQL(t *testing.T) *soakTemporal {
	srv := startSQLTemporal(t)
	return &soakTemporal{name: "Temporal server on PostgreSQL", env: envOptions{temporalAddress: srv.Address, faults: true}, sql: srv}
}

func (s *soakTemporal) restart(ctx context.Context, down time.Duration) error {
	if s.sql != nil {
		return s.sql.Restart(ctx, down)
	}
	return s.stack.RestartTemporal(ctx, down)
}

func (s *soakTemporal) pid() int {
	if s.sql != nil {
		return s.sql.PID()
	}
	return s.stack.Temporal.PID()
}

// soakSample is one reading of the processes' memory and the steady provisioner's goroutines.
type soakSample struct {
	at                          time.Duration
	provisionerMiB, goroutines  float64
	temporalMiB, testProcessMiB float64
}

func takeSoakSample(start time.Time, port, pid, temporalPID int) soakSample {
	s := soakSample{at: time.Since(start), provisionerMiB: procstat.RSSMiB(pid), testProcessMiB: procstat.RSSMiB(os.Getpid()),
		temporalMiB: procstat.RSSMiB(temporalPID)}
	if x, err := scrape(port); err == nil {
		s.goroutines = x.sum("go_goroutines")
	}
	return s
}

// logSlopes reports each series' least-squares slope per hour after warm-up, with its range.
func logSlopes(t *testing.T, samples []soakSample, warmup time.Duration, temporalName string) {
	t.Helper()
	var kept []soakSample
	for _, s := range samples {
		if s.at >= warmup {
			kept = append(kept, s)
		}
	}
	for _, series := range []struct {
		name, unit string
		v          func(soakSample) float64
	}{
		{"provisioner (never killed) RSS", "MiB", func(s soakSample) float64 { return s.provisionerMiB }},
		{"provisioner (never killed) goroutines", "", func(s soakSample) float64 { return s.goroutines }},
		{temporalName + " RSS", "MiB", func(s soakSample) float64 { return s.temporalMiB }},
		{"broker (the test process: broker, fault proxy, test client) RSS", "MiB", func(s soakSample) float64 { return s.testProcessMiB }},
	} {
		if len(kept) < 2 {
			t.Logf("FAULT soak: %s: too few samples", series.name)
			continue
		}
		var sx, sy, sxx, sxy float64
		lo, hi := series.v(kept[0]), series.v(kept[0])
		for _, s := range kept {
			x, y := s.at.Hours(), series.v(s)
			sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
			lo, hi = min(lo, y), max(hi, y)
		}
		k := float64(len(kept))
		slope := (k*sxy - sx*sy) / (k*sxx - sx*sx)
		t.Logf("FAULT soak: %s %.0f-%.0f %s over %d samples after %v, slope %+.1f %s/h",
			series.name, lo, hi, series.unit, len(kept), warmup.Round(time.Second), slope, series.unit)
		// the series itself: a spike at a fault and a trend give the same range and can give the
		// same slope over a short soak
		var b strings.Builder
		for _, s := range samples {
			fmt.Fprintf(&b, " %.0f", series.v(s))
		}
		t.Logf("soak series, %s, every 15 s:%s", series.name, b.String())
	}
}

// soakWindow is a stretch of a soak that a fault opened.
type soakWindow struct {
	at    time.Time
	fault string
}

// simLatency is p50/p95/p99 of the hosts' announce-to-restart times.
func simLatency(st fleetsim.Status) string {
	return percentiles(latencies(st, time.Time{}, time.Now()))
}

// latencies are the announce-to-restart times of the restarted hosts announced in [from, to).
func latencies(st fleetsim.Status, from, to time.Time) []time.Duration {
	var d []time.Duration
	for _, h := range st.Hosts {
		if h.Restarted && !h.AnnouncedAt.IsZero() && !h.AnnouncedAt.Before(from) && h.AnnouncedAt.Before(to) {
			d = append(d, h.RestartedAt.Sub(h.AnnouncedAt))
		}
	}
	return d
}

// percentiles is p50/p95/p99 and the maximum of d, which it sorts.
func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) time.Duration {
		return d[min(len(d)-1, int(q*float64(len(d))))].Round(10 * time.Millisecond)
	}
	return fmt.Sprintf("p50 %v, p95 %v, p99 %v, max %v", at(0.50), at(0.95), at(0.99), d[len(d)-1].Round(10*time.Millisecond))
}

// goroutineStacks counts a provisioner's goroutines by stack (the functions of its frames), from
// its /debug/pprof/goroutine?debug=1 page; nil when it cannot be read.
func goroutineStacks(port int) map[string]int {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", port))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	stacks := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	count, frames := 0, []string(nil)
	flush := func() {
		if count > 0 {
			stacks[strings.Join(frames, " < ")] += count
		}
		count, frames = 0, nil
	}
	for sc.Scan() {
		line := sc.Text()
		switch f := strings.Fields(line); {
		case len(f) >= 2 && f[1] == "@":
			flush()
			count, _ = strconv.Atoi(f[0])
		case len(f) >= 3 && f[0] == "#" && !strings.HasPrefix(f[2], "runtime."):
			fn, _, _ := strings.Cut(f[2], "+0x")
			frames = append(frames, fn)
		}
	}
	flush()
	return stacks
}

// logGrowth says which of the steady provisioner's stacks hold more goroutines at the end than
// after warm-up: what a rising goroutine series is made of.
func logGrowth(t *testing.T, early, late map[string]int) {
	t.Helper()
	if early == nil || late == nil {
		t.Logf("FAULT soak: goroutine stacks not read")
		return
	}
	type grown struct {
		stack    string
		from, to int
	}
	var g []grown
	for stack, n := range late {
		if n > early[stack] {
			g = append(g, grown{stack, early[stack], n})
		}
	}
	sort.Slice(g, func(i, j int) bool { return g[i].to-g[i].from > g[j].to-g[j].from })
	t.Logf("FAULT soak: %d stacks of the provisioner (never killed) hold more goroutines at the end than after warm-up", len(g))
	for _, x := range g[:min(len(g), 10)] {
		t.Logf("soak goroutines %d -> %d: %s", x.from, x.to, x.stack)
	}
}
