package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/choria-io/go-choria/protocol"
	"github.com/choria-io/go-choria/providers/discovery/broadcast"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/discovery"
	"github.com/choria-temporal/provisioner/internal/dev/procstat"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// SmallFleetTarget is one provisioner measured by SmallFleet.
type SmallFleetTarget struct {
	Name string
	Bin  string
	// Original runs Bin with the Choria Provisioner's command line, which has no choria_config
	// key: run --config FILE --choria-config FILE. It reads the same YAML (it ignores the keys it
	// does not know).
	Original bool
	// Env is extra environment for the provisioner (PROVISIONER_* overrides of this project's builds).
	Env []string
}

// SmallFleetOptions configure SmallFleet.
type SmallFleetOptions struct {
	Self    string // the dev binary: dev stack and real servers
	Dir     string
	Servers int // real servers, started and waiting before the provisioner starts
	Runs    int
	Log     io.Writer
	// DevArgs are extra dev stack flags (e.g. --in-memory).
	DevArgs []string
	// Breakdown prints, for this project's builds, where each run's time went: when the host
	// workflows started, and each step's wait for a worker and execution, from their histories.
	Breakdown bool
}

// SmallFleetResult is one target's times from the provisioner's start to its last server
// connected as a normal server.
type SmallFleetResult struct {
	Name  string
	Times []time.Duration
}

// SmallFleet measures what a small site sees when it switches: servers are already waiting in
// provisioning mode (started first, their startup events gone), the provisioner starts, and the
// clock stops when the last server has connected as a normal server (its status file, written
// right after it connects, says so). Each run is a fresh dev stack; targets take turns within a
// run so that drift on a shared machine spreads over all of them.
func SmallFleet(ctx context.Context, o SmallFleetOptions, targets []SmallFleetTarget) ([]SmallFleetResult, error) {
	if o.Servers <= 0 {
		o.Servers = 10
	}
	if o.Runs <= 0 {
		o.Runs = 5
	}
	res := make([]SmallFleetResult, len(targets))
	for i, t := range targets {
		res[i].Name = t.Name
	}
	for run := 1; run <= o.Runs; run++ {
		for i, t := range targets {
			d, err := smallFleetOnce(ctx, o, t, filepath.Join(o.Dir, fmt.Sprintf("%s-%d", t.Name, run)))
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", t.Name, run, err)
			}
			fmt.Fprintf(o.Log, "[small-fleet] %s run %d: %d servers connected %.2f s after the provisioner started\n", t.Name, run, o.Servers, d.Seconds())
			res[i].Times = append(res[i].Times, d)
		}
	}
	return res, nil
}

func smallFleetOnce(ctx context.Context, o SmallFleetOptions, t SmallFleetTarget, dir string) (time.Duration, error) {
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return 0, err
	}
	dev, devExited, err := startWatched(ctx, filepath.Join(dir, "dev.out"), nil, o.Self, append([]string{"dev", "--dir", dir, "--servers", strconv.Itoa(o.Servers),
		"--ui-port", "0", "--temporal-port", strconv.Itoa(ports[0]), "--monitor-port", strconv.Itoa(ports[1]),
		"--codec-port", strconv.Itoa(ports[2]), "--no-provisioner"}, o.DevArgs...)...)
	if err != nil {
		return 0, err
	}
	defer stop(dev)
	if err := waitStarted(ctx, 90*time.Second, devExited, filepath.Join(dir, "dev.out"), func() bool { return fileContains(filepath.Join(dir, "dev.out"), "Press Ctrl-C") }); err != nil {
		return 0, fmt.Errorf("dev stack did not start: %w (see %s/dev.out)", err, dir)
	}
	conf := filepath.Join(dir, "provisioner.yaml")
	if err := waitProvisioningMode(ctx, conf, o.Servers); err != nil {
		return 0, err
	}

	args := []string{"run", "--config", conf}
	if t.Original {
		args = append(args, "--choria-config", filepath.Join(dir, "client.conf"))
	}
	temporalPID, _ := findPID(fmt.Sprintf("--port %d", ports[0]), "start-dev")
	cpu0 := map[string]time.Duration{"temporal": procstat.TreeCPU(temporalPID), "dev stack (broker, servers, helpers)": procstat.TreeCPU(dev.Process.Pid)}
	began := time.Now()
	prov, err := start(ctx, filepath.Join(dir, "provisioner.out"), t.Env, t.Bin, args...)
	if err != nil {
		return 0, err
	}
	defer stop(prov)
	var last time.Time
	err = waitFor(ctx, 2*time.Minute, func() bool {
		var ok bool
		last, ok = allConnected(filepath.Join(dir, "fleet"), o.Servers)
		return ok
	})
	if err != nil {
		return 0, fmt.Errorf("servers were not all provisioned: %w (see %s)", err, dir)
	}
	if o.Breakdown {
		took := last.Sub(began)
		cpu := map[string]time.Duration{"provisioner (with helpers)": procstat.TreeCPU(prov.Process.Pid),
			"temporal": procstat.TreeCPU(temporalPID) - cpu0["temporal"]}
		cpu["dev stack (broker, servers, helpers)"] = procstat.TreeCPU(dev.Process.Pid) - cpu0["dev stack (broker, servers, helpers)"] - cpu["temporal"]
		for _, name := range []string{"provisioner (with helpers)", "temporal", "dev stack (broker, servers, helpers)"} {
			fmt.Fprintf(o.Log, "[small-fleet]   CPU %-36s %5.0f ms (%.0f%% of one core over %.2f s)\n", name,
				float64(cpu[name].Milliseconds()), 100*cpu[name].Seconds()/took.Seconds(), took.Seconds())
		}
	}
	if o.Breakdown && !t.Original {
		if err := breakdown(ctx, o.Log, conf, began); err != nil {
			fmt.Fprintf(o.Log, "[small-fleet] no breakdown: %v\n", err)
		}
	}
	return last.Sub(began), nil
}

// breakdown prints when the host workflows started after the provisioner did, and per step the
// mean wait from scheduled to started and the mean execution, from the hosts' histories.
func breakdown(ctx context.Context, out io.Writer, conf string, began time.Time) error {
	c, err := dialSite(ctx, conf)
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowType = '" + workflows.WorkflowName + "'"})
	if err != nil {
		return err
	}
	type acc struct {
		wait, exec time.Duration
		n          int
	}
	steps := map[string]*acc{}
	var order []string
	var firstStart, lastStart, lastRestart time.Duration
	for i, ex := range resp.GetExecutions() {
		st := ex.GetStartTime().AsTime().Sub(began)
		if i == 0 || st < firstStart {
			firstStart = st
		}
		lastStart = max(lastStart, st)
		scheduled := map[int64]*historypb.HistoryEvent{}
		started := map[int64]time.Time{}
		it := c.GetWorkflowHistory(ctx, ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return err
			}
			switch {
			case ev.GetActivityTaskScheduledEventAttributes() != nil:
				scheduled[ev.GetEventId()] = ev
			case ev.GetActivityTaskStartedEventAttributes() != nil:
				started[ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId()] = ev.GetEventTime().AsTime()
			case ev.GetActivityTaskCompletedEventAttributes() != nil:
				sid := ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
				sch := scheduled[sid]
				name := sch.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
				a := steps[name]
				if a == nil {
					a = &acc{}
					steps[name] = a
					order = append(order, name)
				}
				a.wait += started[sid].Sub(sch.GetEventTime().AsTime())
				a.exec += ev.GetEventTime().AsTime().Sub(started[sid])
				a.n++
				if name == "Restart" {
					lastRestart = max(lastRestart, ev.GetEventTime().AsTime().Sub(began))
				}
			}
		}
	}
	fmt.Fprintf(out, "[small-fleet]   %d host workflows started %.2f–%.2f s after the provisioner; last restart RPC done at %.2f s\n",
		len(resp.GetExecutions()), firstStart.Seconds(), lastStart.Seconds(), lastRestart.Seconds())
	for _, name := range order {
		a := steps[name]
		fmt.Fprintf(out, "[small-fleet]   %-14s wait %4.0f ms, run %4.0f ms (mean of %d)\n", name,
			float64(a.wait.Milliseconds())/float64(a.n), float64(a.exec.Milliseconds())/float64(a.n), a.n)
	}
	return nil
}

// waitProvisioningMode waits until every server answers a discovery on the provisioning
// collective, as the provisioner's own sweep will find them.
func waitProvisioningMode(ctx context.Context, conf string, servers int) error {
	cfg, err := config.Load(conf)
	if err != nil {
		return err
	}
	fw, err := service.NewChoriaFramework(cfg, zap.NewNop())
	if err != nil {
		return err
	}
	filter := protocol.NewFilter()
	filter.AddAgentFilter(discovery.ProvisionAgent)
	found := 0
	err = waitFor(ctx, 60*time.Second, func() bool {
		nodes, err := broadcast.New(fw).Discover(ctx, broadcast.Filter(filter), broadcast.Collective(discovery.ProvisioningCollective),
			broadcast.Timeout(time.Second), broadcast.Name("small-fleet-bench"))
		found = len(nodes)
		return err == nil && found == servers
	})
	if err != nil {
		return fmt.Errorf("%d of %d servers in provisioning mode: %w", found, servers, err)
	}
	return nil
}

// allConnected reads every server's status file: when each says it runs out of provisioning mode
// and connected, it returns the latest write, which followed that server's connection.
func allConnected(fleetDir string, servers int) (time.Time, bool) {
	var last time.Time
	dirs, _ := filepath.Glob(filepath.Join(fleetDir, "*"))
	n := 0
	for _, d := range dirs {
		f := filepath.Join(d, "status.json")
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var st struct {
			ConnectedServer  string `json:"connected_server"`
			ProvisioningMode bool   `json:"provisioning_mode"`
		}
		if json.Unmarshal(b, &st) != nil || st.ProvisioningMode || st.ConnectedServer == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		n++
		if fi.ModTime().After(last) {
			last = fi.ModTime()
		}
	}
	return last, n == servers
}

// SmallFleetTable is the results as a markdown table: each target's runs, median and range.
func SmallFleetTable(servers int, res []SmallFleetResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| provisioner | %d servers connected after (s), each run | median | range |\n|---|---|---|---|\n", servers)
	for _, r := range res {
		times := make([]string, len(r.Times))
		sorted := append([]time.Duration(nil), r.Times...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		for i, d := range r.Times {
			times[i] = fmt.Sprintf("%.2f", d.Seconds())
		}
		med := sorted[len(sorted)/2]
		if len(sorted)%2 == 0 {
			med = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f–%.2f |\n", r.Name, strings.Join(times, ", "), med.Seconds(),
			sorted[0].Seconds(), sorted[len(sorted)-1].Seconds())
	}
	return b.String()
}
