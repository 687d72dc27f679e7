// Package bench drives `make bench`: for each scenario a fresh dev stack (Temporal dev server on a
// WAL SQLite file, broker), the provisioner as a process of its own, and a simulated fleet, all
// on loopback. It measures throughput, latency percentiles from each host's sighting, CPU and
// peak RSS per process, and Temporal history events per host. Not a test: numbers, not verdicts.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/internal/dev/procstat"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// Scenario is one benchmark run.
type Scenario struct {
	Name  string
	Hosts int
	Rate  float64 // arrivals per second, 0: all at once
	// SimArgs are extra fleet-sim flags (failure injection).
	SimArgs []string
	// Env is extra provisioner environment (PROVISIONER_* configuration overrides).
	Env []string
	// DevArgs are extra dev stack flags (Temporal dynamic config).
	DevArgs []string
	// Timeout bounds the run.
	Timeout time.Duration
	// CompareWith names the scenario whose baseline and original runs this one is compared with
	// (a mode of this build that older builds and the Choria Provisioner do not have).
	CompareWith string
	// HelperArgs are added to the site's helper command line, for every build.
	HelperArgs []string
	// Temporal is the shape of Temporal it runs on: ShapeDevServer or ShapePostgres (tuned by Postgres).
	Temporal string
	Postgres PostgresTuning
	// AuditSink turns the audit sink on (audit.sink: "file", "stdout" or "stream", the last with
	// DevArgs --streams), with a key of the run's own: the identity record's cost per issuance,
	// against the same scenario without.
	AuditSink string
}

// benchDevArgs are dev stack flags every scenario and every build runs with. The Temporal CLI's
// dev server forces a search attribute cache refresh on every read (a testing aid, so that an
// attribute added a moment ago is seen at once; a production server's default is off): that
// was ~20 cluster-metadata queries per host, on the dev server's one SQLite connection, and
// 10-30 % of the throughput of a 500-host burst. The bench's stack registers its attributes
// before any workflow starts, so it does not need the aid.
func benchDevArgs() []string {
	return []string{"--temporal-dynamic-config=system.forceSearchAttributesCacheRefreshOnRead=false"}
}

// Scenarios: 500 hosts at once (the comparison with an older build and the Choria Provisioner),
// 1,000, 10,000 and 50,000 (by hand) at once, 5 arrivals/s for 5 minutes, 5 % of hosts failing
// transiently for 5 s, a helper that takes 100 ms, and fast mode.
var Scenarios = []Scenario{
	{Name: "burst-500", Hosts: 500, Timeout: 15 * time.Minute},
	// fast mode (temporal.fast_mode), which older builds do not have: compared with their burst-500
	{Name: "burst-500-fast", Hosts: 500, Env: []string{"PROVISIONER_TEMPORAL__FAST_MODE=true"}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	// fast mode against an older build's fast mode (a build of this project that has it)
	{Name: "burst-500-fast-ab", Hosts: 500, Env: []string{"PROVISIONER_TEMPORAL__FAST_MODE=true"}, Timeout: 15 * time.Minute},
	{Name: "burst-1000", Hosts: 1000, Timeout: 15 * time.Minute},
	{Name: "steady-5", Hosts: 1500, Rate: 5, Timeout: 15 * time.Minute},
	// the same rate for 2 minutes: the comparison with an older build and the Choria Provisioner
	{Name: "steady-5-short", Hosts: 600, Rate: 5, Timeout: 10 * time.Minute},
	{Name: "flaky-5pct", Hosts: 1000, SimArgs: []string{"--flaky", "0.05", "--flaky-for", "5s", "--flaky-mode", "error"}, Timeout: 15 * time.Minute},
	// the same failures at a steady 5 arrivals/s: recovery without a burst's queueing
	{Name: "flaky-5pct-steady", Hosts: 1000, Rate: 5, SimArgs: []string{"--flaky", "0.05", "--flaky-for", "5s", "--flaky-mode", "error"}, Timeout: 15 * time.Minute},
	// a helper that takes 100 ms (a CMDB lookup): `workers` then bounds the Choria Provisioner's
	// hosts, each from its first RPC to its restart, and only our helper runs
	{Name: "burst-500-slow-helper", Hosts: 500, HelperArgs: []string{"--delay", "100ms"}, Timeout: 15 * time.Minute},
	{Name: "burst-10000", Hosts: 10000, Timeout: 90 * time.Minute},
	// the production shape (docs/deployment.md): the Temporal server on PostgreSQL, compared with
	// the dev server's burst-500 and the Choria Provisioner's
	{Name: "burst-500-pg", Hosts: 500, Temporal: ShapePostgres, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-fast-pg", Hosts: 500, Temporal: ShapePostgres, Env: []string{"PROVISIONER_TEMPORAL__FAST_MODE=true"}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-10000-pg", Hosts: 10000, Temporal: ShapePostgres, Timeout: 90 * time.Minute},
	{Name: "burst-10000-fast", Hosts: 10000, Env: []string{"PROVISIONER_TEMPORAL__FAST_MODE=true"}, Timeout: 90 * time.Minute},
	{Name: "burst-10000-fast-pg", Hosts: 10000, Temporal: ShapePostgres, Env: []string{"PROVISIONER_TEMPORAL__FAST_MODE=true"}, Timeout: 90 * time.Minute},
	// the audit sink (the identity record) on, against burst-500 and burst-500-fast without
	{Name: "burst-500-audit", Hosts: 500, AuditSink: "file", Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-fast-audit", Hosts: 500, AuditSink: "file", Env: []string{"PROVISIONER_TEMPORAL__FAST_MODE=true"}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	// the same on a Choria Streams stream of the broker (audit.sink: stream)
	{Name: "burst-500-audit-stream", Hosts: 500, AuditSink: "stream", DevArgs: []string{"--streams"}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-fast-audit-stream", Hosts: 500, AuditSink: "stream", DevArgs: []string{"--streams"}, Env: []string{"PROVISIONER_TEMPORAL__FAST_MODE=true"}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	// deployment.md's tuning of the production shape, each against burst-500-pg
	{Name: "burst-500-pg-async-commit", Hosts: 500, Temporal: ShapePostgres, Postgres: PostgresTuning{Settings: []string{"synchronous_commit=off"}}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-pg-buffers-512m", Hosts: 500, Temporal: ShapePostgres, Postgres: PostgresTuning{Settings: []string{"shared_buffers=512MB"}}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-pg-shards-512", Hosts: 500, Temporal: ShapePostgres, Postgres: PostgresTuning{HistoryShards: 512}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-pg-shards-1", Hosts: 500, Temporal: ShapePostgres, Postgres: PostgresTuning{HistoryShards: 1}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-pg-conns-50", Hosts: 500, Temporal: ShapePostgres, Postgres: PostgresTuning{StoreConns: 50}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	// eager activity dispatch (system.enableActivityEagerExecution: off in a server by default, on
	// in the dev stack): an activity scheduled by a workflow task comes back in that task's
	// completion response instead of through matching
	{Name: "burst-500-pg-eager-activities", Hosts: 500, Temporal: ShapePostgres, Postgres: PostgresTuning{DynamicConfig: []string{
		"system.enableActivityEagerExecution=true"}}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-fast-pg-eager-activities", Hosts: 500, Temporal: ShapePostgres, Env: []string{"PROVISIONER_TEMPORAL__FAST_MODE=true"}, Postgres: PostgresTuning{DynamicConfig: []string{
		"system.enableActivityEagerExecution=true"}}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-pg-one-partition", Hosts: 500, Temporal: ShapePostgres, Postgres: PostgresTuning{DynamicConfig: []string{
		"matching.numTaskqueueReadPartitions=1", "matching.numTaskqueueWritePartitions=1"}}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	{Name: "burst-500-pg-qps", Hosts: 500, Temporal: ShapePostgres, Postgres: PostgresTuning{DynamicConfig: []string{
		"frontend.persistenceMaxQPS=20000", "history.persistenceMaxQPS=20000", "matching.persistenceMaxQPS=20000"}}, Timeout: 15 * time.Minute, CompareWith: "burst-500"},
	// not in the default set: ~20 minutes of a whole machine (make bench BENCH_SCENARIOS=burst-50000)
	{Name: "burst-50000", Hosts: 50000, Timeout: 4 * time.Hour},
}

// Kinds of provisioner a run measures.
const (
	KindOurs     = "ours"     // this project's `run`: this build or an older one (--baseline-bin)
	KindOriginal = "original" // the Choria Provisioner (--original-bin): its own YAML, no Temporal
)

// Target is the provisioner one run measures.
type Target struct {
	Kind  string
	Bin   string // the binary whose `run` is measured (default for ours: choria-provisioner beside Self)
	Label string // the run's variant in the results
	// Workers is the Choria Provisioner's `workers` (0: its default, the number of CPUs).
	Workers int
}

// Options configure a benchmark run.
type Options struct {
	Self string // this binary: dev stack, fleet-sim
	Dir  string
	Log  io.Writer
}

// Result is one scenario's measurements.
type Result struct {
	Scenario        string  `json:"scenario"`
	Variant         string  `json:"variant,omitempty"`
	Hosts           int     `json:"hosts"`
	ArrivalRate     float64 `json:"arrival_rate,omitempty"`
	Configured      int     `json:"configured"`
	Restarted       int     `json:"restarted"`
	ConfiguredTwice int     `json:"configured_twice"`
	Seconds         float64 `json:"seconds"`
	HostsPerSecond  float64 `json:"hosts_per_second"`

	ToConfiguredMs Percentiles `json:"sighting_to_configured_ms"`
	ToRestartedMs  Percentiles `json:"sighting_to_restarted_ms"`
	// Flaky hosts: from the end of their failure window to configured.
	RecoveryMs *Percentiles `json:"flaky_recovery_ms,omitempty"`

	// Temporal is the shape of Temporal: "" the dev server, "postgres" the server on PostgreSQL.
	Temporal string `json:"temporal,omitempty"`

	ProvisionerCPUMsPerHost float64 `json:"provisioner_cpu_ms_per_host"`
	TemporalCPUMsPerHost    float64 `json:"temporal_cpu_ms_per_host"`
	BrokerCPUMsPerHost      float64 `json:"broker_cpu_ms_per_host"`
	SimulatorCPUMsPerHost   float64 `json:"simulator_cpu_ms_per_host"`
	ProvisionerPeakRSSMiB   float64 `json:"provisioner_peak_rss_mib"`
	BrokerPeakRSSMiB        float64 `json:"broker_peak_rss_mib,omitempty"`
	TemporalPeakRSSMiB      float64 `json:"temporal_peak_rss_mib"`
	SimulatorPeakRSSMiB     float64 `json:"simulator_peak_rss_mib"`
	// The production shape's PostgreSQL: the postmaster and every backend (live or exited), their
	// peak proportional set (shared buffers counted once), and transactions in Temporal's two
	// databases.
	PostgresCPUMsPerHost        float64 `json:"postgres_cpu_ms_per_host,omitempty"`
	PostgresPeakPSSMiB          float64 `json:"postgres_peak_pss_mib,omitempty"`
	PostgresTransactionsPerHost float64 `json:"postgres_transactions_per_host,omitempty"`

	HistoryEventsPerHost float64 `json:"history_events_per_host"`
	RunsPerHost          float64 `json:"runs_per_host"`

	// From the Temporal SDK's metrics on the provisioner's /metrics at the end of the run.
	ActivityScheduleToStartMs     *Latency `json:"activity_schedule_to_start_ms,omitempty"`
	WorkflowTaskScheduleToStartMs *Latency `json:"workflow_task_schedule_to_start_ms,omitempty"`
	// From the Temporal dev server's own /metrics over the measured window, per host configured:
	// "persistence_requests/OP", "persistence_ms/OP" (the database's time, waits for its one connection included), "tasks/TASKTYPE", "service_requests/OP".
	TemporalServerPerHost map[string]float64 `json:"temporal_server_per_host,omitempty"`

	Kind    string  `json:"kind,omitempty"`
	Workers int     `json:"workers,omitempty"`
	Load    float64 `json:"load_before,omitempty"` // the machine's 1-minute load average as the run began
	Machine string  `json:"machine"`
}

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(d)))) - 1
		i = max(0, min(i, len(d)-1))
		return float64(d[i].Microseconds()) / 1000
	}
	return Percentiles{P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: at(1)}
}

// Run runs one scenario against one provisioner.
func Run(ctx context.Context, o Options, sc Scenario, tg Target) (*Result, error) {
	if tg.Kind == "" {
		tg.Kind = KindOurs
	}
	if tg.Bin == "" {
		tg.Bin = filepath.Join(filepath.Dir(o.Self), "choria-provisioner")
	}
	variant := tg.Label
	dir := filepath.Join(o.Dir, sc.Name)
	if variant != "" {
		dir = filepath.Join(o.Dir, sc.Name+"-"+nonWord(variant))
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.Log, "[%s] "+format+"\n", append([]any{sc.Name}, args...)...)
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	tport := ports[0]

	// the dev stack without its provisioner: Temporal (child process) and the broker
	devArgs := append([]string{"dev", "--dir", dir, "--servers", "0", "--ui-port", "0", "--temporal-port", strconv.Itoa(tport),
		"--monitor-port", strconv.Itoa(ports[1]), "--codec-port", strconv.Itoa(ports[2]), "--temporal-metrics-port", strconv.Itoa(ports[3]), "--no-provisioner"}, benchDevArgs()...)
	devArgs = append(devArgs, sc.DevArgs...)
	var db *database
	temporalPID := 0
	if sc.Temporal == ShapePostgres {
		logf("starting PostgreSQL and the Temporal server")
		sqlt, err := productionShape(ctx, dir, sc.Postgres, ports[3])
		if err != nil {
			return nil, err
		}
		defer sqlt.Stop()
		db, temporalPID = &database{pg: sqlt.Postgres}, sqlt.PID()
		devArgs = append(devArgs, "--temporal-address", sqlt.Address)
	}
	dev, devExited, err := startWatched(ctx, filepath.Join(dir, "dev.out"), nil, o.Self, devArgs...)
	if err != nil {
		return nil, err
	}
	defer stop(dev)
	if err := waitStarted(ctx, 90*time.Second, devExited, filepath.Join(dir, "dev.out"), func() bool { return fileContains(filepath.Join(dir, "dev.out"), "Press Ctrl-C") }); err != nil {
		return nil, fmt.Errorf("dev stack did not start: %w (see %s/dev.out)", err, dir)
	}
	if temporalPID == 0 {
		if temporalPID, err = findPID(fmt.Sprintf("--port %d", tport), "start-dev"); err != nil {
			return nil, err
		}
	}
	conf := filepath.Join(dir, "provisioner.yaml")
	brokerURL, token, provJWT, err := fleetCredentials(dir, conf)
	if err != nil {
		return nil, err
	}
	if err := addHelperArgs(conf, sc.HelperArgs); err != nil {
		return nil, err
	}
	env := append([]string{"PROVISIONER_MONITOR_PPROF=true"}, sc.Env...)
	if sc.AuditSink != "" {
		auditEnv, err := auditSink(dir, sc.AuditSink)
		if err != nil {
			return nil, err
		}
		env = append(env, auditEnv...)
	}

	load := loadAverage()
	var prov *exec.Cmd
	if tg.Kind == KindOriginal {
		// the Choria Provisioner reads the same YAML keys and ignores the ones it does not know
		// (temporal, choria_config, ...); its Choria client configuration is a flag
		oconf := filepath.Join(dir, "original.yaml")
		if err := writeOriginalConfig(conf, oconf, tg.Workers); err != nil {
			return nil, err
		}
		// go-choria's client security names the caller after $USER, and refuses to start without it
		prov, err = start(ctx, filepath.Join(dir, "provisioner.out"), []string{"USER=choria-provisioner"}, tg.Bin, "run", "--config", oconf, "--choria-config", filepath.Join(dir, "client.conf"))
		if err != nil {
			return nil, err
		}
		defer stop(prov)
		if err := waitFor(ctx, 60*time.Second, func() bool { return fileContains(filepath.Join(dir, "provisioner.log"), "Choria Provisioner starting") }); err != nil {
			logf("the Choria Provisioner's log did not say it started; going on (%v)", err)
		}
	} else {
		prov, err = start(ctx, filepath.Join(dir, "provisioner.out"), env, tg.Bin, "run", "--config", conf)
		if err != nil {
			return nil, err
		}
		defer stop(prov)
		if err := waitFor(ctx, 60*time.Second, func() bool { return fileContains(filepath.Join(dir, "provisioner.log"), "worker polling") }); err != nil {
			logf("provisioner log did not say it polls; going on (%v)", err)
		}
	}
	time.Sleep(2 * time.Second) // the first discovery sweep (empty) is over

	statusFile := filepath.Join(dir, "sim.json")
	simArgs := append([]string{"fleet-sim", "--broker", brokerURL, "--provisioning-jwt", provJWT, "--token", token,
		"--count", strconv.Itoa(sc.Hosts), "--prefix", "bench-", "--status", statusFile, "--rate", fmt.Sprint(sc.Rate)}, sc.SimArgs...)

	c0 := map[string]time.Duration{"prov": procstat.CPU(prov.Process.Pid), "temporal": procstat.CPU(temporalPID), "dev": procstat.CPU(dev.Process.Pid), "db": db.cpu()}
	server0, serverErr := serverCounts(ports[3])
	tx0, txErr := db.transactions(ctx)
	began := time.Now()
	sim, err := start(ctx, filepath.Join(dir, "sim.out"), nil, o.Self, simArgs...)
	if err != nil {
		return nil, err
	}
	defer stop(sim)
	// a CPU profile of the provisioner while it is busy, to say what bounds it
	// (from 3 s on, for 15 s, and the run waits for it: a 500-host burst is over in ~25 s)
	profiled := make(chan struct{})
	if tg.Kind == KindOurs {
		go func() {
			defer close(profiled)
			time.Sleep(3 * time.Second)
			if err := profile(ports[1], filepath.Join(dir, "provisioner.pprof"), 15); err != nil {
				logf("no CPU profile: %v", err)
			}
		}()
	} else {
		close(profiled)
	}

	var st fleetsim.Status
	deadline := time.Now().Add(sc.Timeout)
	lastLog := time.Now()
	for {
		time.Sleep(time.Second)
		db.sample()
		st = readStatus(statusFile)
		conf, rest := count(st)
		if time.Since(lastLog) > 30*time.Second {
			logf("%d/%d configured, %d restarted, %v", conf, sc.Hosts, rest, time.Since(began).Round(time.Second))
			lastLog = time.Now()
		}
		if rest == sc.Hosts || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", prov.Process.Pid)); err != nil {
			return nil, fmt.Errorf("the provisioner exited (see %s/provisioner.out)", dir)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err() // interrupted: no half-measured result
	}
	end := time.Now()
	c1 := map[string]time.Duration{"prov": procstat.CPU(prov.Process.Pid), "temporal": procstat.CPU(temporalPID), "dev": procstat.CPU(dev.Process.Pid), "sim": procstat.CPU(sim.Process.Pid), "db": db.cpu()}
	server1, err := serverCounts(ports[3])
	if serverErr == nil {
		serverErr = err
	}
	tx1, err := db.transactions(ctx)
	if txErr == nil {
		txErr = err
	}
	// the CPU is read: now the profile may finish
	select {
	case <-profiled:
	case <-time.After(30 * time.Second):
	}

	res := &Result{Scenario: sc.Name, Variant: variant, Hosts: sc.Hosts, ArrivalRate: sc.Rate, Machine: machine(),
		Kind: tg.Kind, Workers: tg.Workers, Load: load, Temporal: sc.Temporal}
	var toConf, toRest, recovery []time.Duration
	var lastConf time.Time
	for _, h := range st.Hosts {
		if h.Configured {
			res.Configured++
			if h.ConfiguredAt.After(lastConf) {
				lastConf = h.ConfiguredAt
			}
		}
		if h.Configures > 1 {
			res.ConfiguredTwice++
		}
		if h.Restarted {
			res.Restarted++
		}
		if !h.AnnouncedAt.IsZero() && !h.ConfiguredAt.IsZero() {
			toConf = append(toConf, h.ConfiguredAt.Sub(h.AnnouncedAt))
		}
		if !h.AnnouncedAt.IsZero() && !h.RestartedAt.IsZero() {
			toRest = append(toRest, h.RestartedAt.Sub(h.AnnouncedAt))
		}
		if h.Flaky && !h.HealthyAt.IsZero() && !h.ConfiguredAt.IsZero() {
			recovery = append(recovery, h.ConfiguredAt.Sub(h.HealthyAt))
		}
	}
	if lastConf.IsZero() {
		lastConf = end
	}
	res.Seconds = round(lastConf.Sub(began).Seconds(), 1)
	res.HostsPerSecond = round(float64(res.Configured)/lastConf.Sub(began).Seconds(), 2)
	res.ToConfiguredMs, res.ToRestartedMs = percentiles(toConf), percentiles(toRest)
	if len(recovery) > 0 {
		p := percentiles(recovery)
		res.RecoveryMs = &p
	}
	n := float64(max(res.Configured, 1))
	res.ProvisionerCPUMsPerHost = round(float64((c1["prov"]-c0["prov"]).Milliseconds())/n, 1)
	res.TemporalCPUMsPerHost = round(float64((c1["temporal"]-c0["temporal"]).Milliseconds())/n, 1)
	res.BrokerCPUMsPerHost = round(float64((c1["dev"]-c0["dev"]).Milliseconds())/n, 1)
	res.SimulatorCPUMsPerHost = round(float64(c1["sim"].Milliseconds())/n, 1)
	res.ProvisionerPeakRSSMiB = round(procstat.PeakRSSMiB(prov.Process.Pid), 0)
	res.TemporalPeakRSSMiB = round(procstat.PeakRSSMiB(temporalPID), 0)
	res.SimulatorPeakRSSMiB = round(procstat.PeakRSSMiB(sim.Process.Pid), 0)
	res.BrokerPeakRSSMiB = round(procstat.PeakRSSMiB(dev.Process.Pid), 0)
	if db != nil {
		res.PostgresCPUMsPerHost = round(float64((c1["db"]-c0["db"]).Milliseconds())/n, 1)
		res.PostgresPeakPSSMiB = round(db.peakPSS, 0)
		if txErr != nil {
			logf("PostgreSQL transactions: %v", txErr)
		} else {
			res.PostgresTransactionsPerHost = round(float64(tx1-tx0)/n, 1)
		}
	}
	if serverErr != nil {
		logf("Temporal server metrics: %v", serverErr)
	} else {
		res.TemporalServerPerHost = perHost(server0, server1, res.Configured)
	}

	if tg.Kind == KindOurs {
		if err := sdkLatencies(ports[1], res); err != nil {
			logf("Temporal SDK metrics: %v", err)
		}
		if err := historyStats(ctx, conf, res); err != nil {
			logf("history statistics: %v", err)
		}
	}
	return res, nil
}

// auditSink is the environment that turns the audit sink on, with a MAC key written for the run.
func auditSink(dir, sink string) ([]string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "audit.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return []string{"PROVISIONER_AUDIT__SINK=" + sink, "PROVISIONER_AUDIT__KEY_FILE=" + keyFile,
		"PROVISIONER_AUDIT__FILE=" + filepath.Join(dir, "audit.jsonl")}, nil
}

// historyStats counts runs per host over every run, and history events per host over a sample.
// It reaches Temporal as the measured provisioner does: the temporal section of its
// configuration file conf (address, namespace, TLS, API key).
func historyStats(ctx context.Context, conf string, res *Result) error {
	c, err := dialSite(ctx, conf)
	if err != nil {
		return err
	}
	defer c.Close()
	var token []byte
	runs := map[string][]string{}
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + workflows.WorkflowName + "'", PageSize: 1000, NextPageToken: token})
		if err != nil {
			return err
		}
		for _, ex := range resp.Executions {
			id := ex.GetExecution().GetWorkflowId()
			runs[id] = append(runs[id], ex.GetExecution().GetRunId())
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	total := 0
	for _, r := range runs {
		total += len(r)
	}
	if len(runs) > 0 {
		res.RunsPerHost = round(float64(total)/float64(len(runs)), 3)
	}
	ids := make([]string, 0, len(runs))
	for id := range runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	sample, events := 0, 0
	for i := 0; i < len(ids) && sample < 50; i += max(1, len(ids)/50) {
		for _, run := range runs[ids[i]] {
			it := c.GetWorkflowHistory(ctx, ids[i], run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				if _, err := it.Next(); err != nil {
					return err
				}
				events++
			}
		}
		sample++
	}
	if sample > 0 {
		res.HistoryEventsPerHost = round(float64(events)/float64(sample), 1)
	}
	return nil
}

func count(st fleetsim.Status) (configured, restarted int) {
	for _, h := range st.Hosts {
		if h.Configured {
			configured++
		}
		if h.Restarted {
			restarted++
		}
	}
	return
}

func readStatus(file string) fleetsim.Status {
	var st fleetsim.Status
	if b, err := os.ReadFile(file); err == nil {
		_ = json.Unmarshal(b, &st)
	}
	return st
}

// fleetCredentials reads what fleet-sim needs from the dev stack's files.
func fleetCredentials(dir, conf string) (broker, token, provJWT string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "client.conf"))
	if err != nil {
		return "", "", "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "plugin.choria.middleware_hosts" {
			broker = strings.TrimSpace(v)
		}
	}
	s, err := os.ReadFile(filepath.Join(dir, "credentials", "secrets"))
	if err != nil {
		return "", "", "", err
	}
	token, _, _ = strings.Cut(string(s), "\n")
	if broker == "" {
		return "", "", "", errors.New("no middleware_hosts in client.conf")
	}
	return broker, strings.TrimSpace(token), filepath.Join(dir, "credentials", "provisioning.jwt"), nil
}

func start(ctx context.Context, out string, env []string, bin string, args ...string) (*exec.Cmd, error) {
	cmd, _, err := startWatched(ctx, out, env, bin, args...)
	return cmd, err
}

// startWatched starts a process whose output goes to the file out; the channel is closed when it
// has ended.
func startWatched(ctx context.Context, out string, env []string, bin string, args ...string) (*exec.Cmd, <-chan struct{}, error) {
	f, err := os.Create(out)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	return cmd, exited, nil
}

// waitStarted waits until ok holds for a process started by startWatched; one that exits first
// is reported at once with the end of its output file, instead of after the timeout.
func waitStarted(ctx context.Context, d time.Duration, exited <-chan struct{}, out string, ok func() bool) error {
	gone := false
	err := waitFor(ctx, d, func() bool {
		select {
		case <-exited:
			gone = true
			return true
		default:
			return ok()
		}
	})
	if err != nil || !gone || ok() {
		return err
	}
	b, _ := os.ReadFile(out)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return fmt.Errorf("it exited; its last output: %q", strings.TrimSpace(string(b)))
}

// stop interrupts a process group and kills it if it lingers.
func stop(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	for i := 0; i < 100; i++ {
		if syscall.Kill(cmd.Process.Pid, 0) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

func waitFor(ctx context.Context, d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func fileContains(file, s string) bool {
	b, err := os.ReadFile(file)
	return err == nil && strings.Contains(string(b), s)
}

// findPID finds a process whose command line contains every part.
func findPID(parts ...string) (int, error) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cl := strings.ReplaceAll(string(b), "\x00", " ")
		all := true
		for _, p := range parts {
			all = all && strings.Contains(cl, p)
		}
		if all {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process with %q", parts)
}

func profile(port int, file string, seconds int) error {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", port, seconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeOriginalConfig writes the Choria Provisioner's configuration: this site's YAML, whose
// Choria Provisioner keys it reads as they are, and its workers.
// addHelperArgs appends args to the helper command line of the site's YAML (a quoted string).
func addHelperArgs(conf string, args []string) error {
	if len(args) == 0 {
		return nil
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		v, ok := strings.CutPrefix(line, "helper: ")
		if !ok {
			continue
		}
		cmd, err := strconv.Unquote(v)
		if err != nil {
			return fmt.Errorf("%s: the helper line is not a quoted string: %w", conf, err)
		}
		lines[i] = "helper: " + strconv.Quote(cmd+" "+strings.Join(args, " "))
		return os.WriteFile(conf, []byte(strings.Join(lines, "\n")), 0o600)
	}
	return fmt.Errorf("%s has no helper line", conf)
}

func writeOriginalConfig(from, to string, workers int) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "workers:") {
			continue
		}
		out = append(out, line)
	}
	if workers > 0 {
		out = append(out, fmt.Sprintf("workers: %d", workers))
	}
	return os.WriteFile(to, []byte(strings.Join(out, "\n")+"\n"), 0o600)
}

func nonWord(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// loadAverage is the machine's 1-minute load average.
func loadAverage() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

func machine() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	model := ""
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			break
		}
	}
	var mem float64
	if m, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(m))
		if len(f) > 1 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mem = kb / 1024 / 1024
		}
	}
	return fmt.Sprintf("%d cores (%s), %.0f GiB", numCPU(), model, mem)
}

// dialSite reaches Temporal as the measured provisioner does: the temporal section of its
// configuration file conf (address, namespace, TLS, API key).
func dialSite(ctx context.Context, conf string) (client.Client, error) {
	cfg, err := config.LoadForOperator(conf)
	if err != nil {
		return nil, err
	}
	return service.DialTemporal(ctx, cfg, zap.NewNop())
}
