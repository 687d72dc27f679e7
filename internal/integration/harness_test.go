package integration

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

type env struct {
	t      *testing.T
	stack  *devstack.Stack
	cfg    *config.Config
	client client.Client
	// refusals is set by tests that make the worker refuse payloads or tasks; every other test's
	// replicas must refuse nothing (each of their payloads is the worker's own)
	refusals bool
	simErr   atomic.Pointer[string] // a fleet-sim process that exited before the test's end: why
}

type envOptions struct {
	ownTemporalWithUI bool       // a Temporal of the test's own, with the Web UI
	ownTemporal       bool       // a Temporal of the test's own
	persist           bool       // ... on a SQLite file, so it survives a restart
	dbFile            string     // ... that file (default: in the test's directory)
	temporalAddress   string     // a Temporal the test started itself (postgres_test.go)
	temporalTLS       config.TLS // temporal.tls for temporalAddress
	mode              string     // devstack.ModeIssuer (default) or ModePKI
	extraConfig       string     // YAML appended to the provisioner's configuration
	servers           int
	helper            func(stack *devstack.Stack) string        // helper command line; nil: the example helper
	prepare           func(t *testing.T, stack *devstack.Stack) // last change to the site's files before the config is loaded
	failing           int                                       // the example helper refuses the first n servers (devstack.StackOptions.Failing)
	uiCodecEndpoint   string                                    // the Web UI decodes through this codec server
	faults            bool                                      // fault proxies between the provisioner and the broker and Temporal
	interval          string                                    // discovery's sweep interval (default 1m)
}

var nonWord = regexp.MustCompile(`[^a-zA-Z0-9]+`)

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the Temporal dev server, a broker and go-choria servers")
	}
	name := strings.ToLower(nonWord.ReplaceAllString(strings.TrimPrefix(t.Name(), "TestIntegration"), "-"))
	dir := t.TempDir()
	ctx := context.Background()
	opts := devstack.StackOptions{
		Dir: dir, Self: devBinary, TemporalAddress: temporalAddress, Servers: 0,
		IdentityPrefix: name + "-", TaskQueue: "it-" + name, DeferDelay: "2s", LogLevel: "info", Mode: o.mode,
		Failing: o.failing, UICodecEndpoint: o.uiCodecEndpoint, FaultProxies: o.faults, Interval: o.interval,
	}
	if o.ownTemporalWithUI || o.ownTemporal {
		bin, err := devstack.FindTemporalBinary()
		require.NoError(t, err)
		opts.TemporalAddress, opts.TemporalBin, opts.UI, opts.Persist = "", bin, o.ownTemporalWithUI, o.persist
		opts.TemporalDBFile = o.dbFile
	}
	if o.temporalAddress != "" {
		opts.TemporalAddress = o.temporalAddress
	}
	opts.TemporalTLS = o.temporalTLS
	stack, err := devstack.StartStack(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(stack.Stop)
	watchStack(t, stack)
	if o.helper != nil {
		stack.Opts.Helper = o.helper(stack)
		require.NoError(t, stack.RewriteConfig())
	}
	if o.extraConfig != "" {
		f, err := os.OpenFile(stack.ConfigFile, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString(o.extraConfig)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	if o.prepare != nil {
		o.prepare(t, stack)
	}
	require.NoError(t, stack.Fleet.StartN(o.servers))

	cfg, err := config.Load(stack.ConfigFile)
	require.NoError(t, err)
	// the test's own client goes straight to Temporal, past any fault proxy
	direct := *cfg
	direct.Temporal.Address = stack.TemporalAddress
	c, err := service.DialTemporal(ctx, &direct, zap.NewNop())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &env{t: t, stack: stack, cfg: cfg, client: c}
}

// watchStack fails the test when the broker or Temporal ends on its own, at once and with its last
// output, and logs a fleet server that exits (a shutdown the helper asked for is one), until the
// test's cleanup.
func watchStack(t *testing.T, stack *devstack.Stack) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case e := <-stack.Exits():
				if e.Essential {
					t.Errorf("%v", e)
				} else {
					t.Logf("%v", e)
				}
			}
		}
	}()
	t.Cleanup(func() { close(done); <-ended })
}

// provisioner runs one provisioner replica in this process until the test ends.
func (e *env) provisioner(name string) *service.Service {
	e.t.Helper()
	return e.replica(name, service.Options{Worker: true, Discovery: true})
}

// replica runs the parts of a provisioner opts choose in this process until the test ends.
func (e *env) replica(name string, opts service.Options) *service.Service {
	e.t.Helper()
	svc, _ := e.replicaWith(name, e.cfg, opts)
	return svc
}

// replicaWith runs a replica on cfg until the test ends or stop is called.
func (e *env) replicaWith(name string, cfg *config.Config, opts service.Options) (svc *service.Service, stop func()) {
	e.t.Helper()
	log, err := logging.New("info", filepath.Join(e.stack.Opts.Dir, name+".log"))
	require.NoError(e.t, err)
	opts.Registry = prometheus.NewRegistry()
	svc, err = service.New(cfg, log.With(zap.String("replica", name)), opts)
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- svc.Run(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		require.NoError(e.t, err)
	case <-time.After(30 * time.Second):
		cancel()
		e.t.Fatal("provisioner did not start")
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(func() {
		stop()
		if !e.refusals {
			assert.Zero(e.t, refusedTotal(e.t, svc), "%s refused payloads or tasks of its own runs", name)
		}
	})
	return svc, stop
}

// refusedTotal is what choria_provisioner_refused_payloads counted, every reason.
func refusedTotal(t *testing.T, svc *service.Service) float64 {
	t.Helper()
	families, err := svc.Registry().Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() == "choria_provisioner_refused_payloads" {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// waitProvisioned waits until every fleet member runs as a normal server on its written config.
func (e *env) waitProvisioned(timeout time.Duration, members ...*devstack.FleetMember) {
	e.t.Helper()
	if assert.Eventually(e.t, func() bool {
		for _, m := range members {
			if !devstack.Provisioned(m) || !runningProvisioned(m) {
				return false
			}
		}
		return true
	}, timeout, 200*time.Millisecond, "servers were not provisioned in time") {
		return
	}
	// what a failure in CI needs to be read without a rerun: where each host's latest run stands
	for _, m := range members {
		state := "no run"
		if resp, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(m.Identity), ""); err == nil {
			info := resp.GetWorkflowExecutionInfo()
			state = fmt.Sprintf("run %s %s, started %s, closed %s, %d activities pending, search attributes %v",
				info.GetExecution().GetRunId(), info.GetStatus(), info.GetStartTime().AsTime().Format(time.RFC3339Nano),
				info.GetCloseTime().AsTime().Format(time.RFC3339Nano), len(resp.GetPendingActivities()), info.GetSearchAttributes().GetIndexedFields())
		}
		e.t.Logf("%s: config written %v, running provisioned %v; latest %s", m.Identity, devstack.Provisioned(m), runningProvisioned(m), state)
	}
	e.logProvisioners()
	e.t.FailNow()
}

// logProvisioners logs what the test's provisioners said about sweeps, pauses and failures (their
// warnings, errors and sweep summaries, the last 40 of each log), for a failure read in CI.
func (e *env) logProvisioners() {
	logs, _ := filepath.Glob(filepath.Join(e.stack.Opts.Dir, "*.log"))
	for _, name := range logs {
		data, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		var picked []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) ||
				strings.Contains(line, "discovery sweep") || strings.Contains(line, "paused") {
				picked = append(picked, line)
			}
		}
		picked = picked[max(0, len(picked)-40):]
		e.t.Logf("%s (%d lines picked):\n%s", filepath.Base(name), len(picked), strings.Join(picked, "\n"))
	}
}

// runningProvisioned reads the server's status file: written by the restarted process, it says
// whether it is out of provisioning mode and connected.
func runningProvisioned(m *devstack.FleetMember) bool {
	b, err := os.ReadFile(filepath.Join(m.Dir, "status.json"))
	if err != nil {
		return false
	}
	var st struct {
		Identity         string `json:"identity"`
		ConnectedServer  string `json:"connected_server"`
		ProvisioningMode bool   `json:"provisioning_mode"`
	}
	return json.Unmarshal(b, &st) == nil && st.Identity == m.Identity && !st.ProvisioningMode && st.ConnectedServer != ""
}

// verifyServerJWT checks what the issue asks of every provisioned server: a server.jwt that
// verifies against the Organization Issuer and matches the server's own seed.
func (e *env) verifyServerJWT(m *devstack.FleetMember) {
	e.t.Helper()
	raw, err := os.ReadFile(filepath.Join(m.Dir, "server.jwt"))
	require.NoError(e.t, err)
	unverified, err := tokens.ParseServerTokenUnverified(string(raw))
	require.NoError(e.t, err)
	issuerPub := ed25519.PublicKey(mustHex(e.t, e.stack.Creds.IssuerPublic))
	ok, _, err := unverified.IsSignedByIssuer(issuerPub)
	require.NoError(e.t, err)
	require.True(e.t, ok, "%s: server.jwt does not chain to the issuer", m.Identity)
	// with the issuer's key, go-choria verifies the signature through the chain
	claims, err := tokens.ParseServerToken(string(raw), issuerPub)
	require.NoError(e.t, err, "%s: server.jwt signature", m.Identity)
	require.Equal(e.t, m.Identity, claims.ChoriaIdentity)
	require.Equal(e.t, []string{"choria"}, claims.Collectives)
	match, err := claims.IsMatchingSeedFile(filepath.Join(m.Dir, "server.seed"))
	require.NoError(e.t, err)
	require.True(e.t, match, "%s: server.jwt does not match server.seed", m.Identity)
}

// runs lists every workflow run of a host (visibility is eventually consistent: poll).
func (e *env) runs(identity string, want int) []*workflowservice.ListWorkflowExecutionsResponse {
	e.t.Helper()
	var last *workflowservice.ListWorkflowExecutionsResponse
	if !assert.Eventually(e.t, func() bool {
		resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", workflows.WorkflowID(identity)),
		})
		if err != nil {
			return false
		}
		last = resp
		closed := 0
		for _, ex := range resp.Executions {
			if ex.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				closed++
			}
		}
		return closed == want && len(resp.Executions) == want
	}, 20*time.Second, 200*time.Millisecond, "%s: expected %d closed runs", identity, want) {
		// the listing as it was last read (a message argument would be evaluated before the wait)
		for _, ex := range last.GetExecutions() {
			e.t.Logf("%s: run %s %s", identity, ex.GetExecution().GetRunId(), ex.GetStatus())
			for _, f := range e.activityFailures(e.runHistory(ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId())) {
				e.t.Logf("  activity failure: %s", f)
			}
		}
		e.t.FailNow()
	}
	return []*workflowservice.ListWorkflowExecutionsResponse{last}
}

func (e *env) history(identity string) []*historypb.HistoryEvent {
	e.t.Helper()
	return e.historyOf(workflows.WorkflowID(identity))
}

// historyOf is the latest run's history of any workflow (the control workflow, for one).
func (e *env) historyOf(workflowID string) []*historypb.HistoryEvent {
	e.t.Helper()
	return e.runHistory(workflowID, "")
}

// runHistory is one run's history (runID empty: the latest run's).
func (e *env) runHistory(workflowID, runID string) []*historypb.HistoryEvent {
	e.t.Helper()
	it := e.client.GetWorkflowHistory(context.Background(), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(e.t, err)
		events = append(events, ev)
	}
	return events
}

// scheduled lists the activity types a history scheduled, in order.
func scheduled(events []*historypb.HistoryEvent) []string {
	var out []string
	for _, ev := range events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			out = append(out, a.GetActivityType().GetName())
		}
	}
	return out
}

// helperQueue is the task queue a run's (last) helper call was scheduled on.
func helperQueue(events []*historypb.HistoryEvent) string {
	q := ""
	for _, ev := range events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == activities.RunHelperName {
			q = a.GetTaskQueue().GetName()
		}
	}
	return q
}

// localActivities lists the activity types a history ran as local activities, in order.
func (e *env) localActivities(events []*historypb.HistoryEvent) []string {
	e.t.Helper()
	return e.decodeEach(events, func(dc converter.DataConverter, ev *historypb.HistoryEvent) (string, bool) {
		m := ev.GetMarkerRecordedEventAttributes()
		if m.GetMarkerName() != "LocalActivity" {
			return "", false
		}
		var data struct{ ActivityType string }
		require.NoError(e.t, dc.FromPayloads(m.GetDetails()["data"], &data))
		return data.ActivityType, true
	})
}

// decodeEach lists, in order, what f makes of each event it keeps, with the data converter the
// provisioner uses (payloads and failure messages in a history are encrypted).
func (e *env) decodeEach(events []*historypb.HistoryEvent, f func(converter.DataConverter, *historypb.HistoryEvent) (string, bool)) []string {
	e.t.Helper()
	dc, _, err := service.DataConverter(e.cfg)
	require.NoError(e.t, err)
	var out []string
	for _, ev := range events {
		if v, ok := f(dc, ev); ok {
			out = append(out, v)
		}
	}
	return out
}

// costOf is what a host's run cost Temporal: history events, workflow tasks, markers, and the
// idle tasks among them: completed with no command, because a result the workflow waits for
// with others (the reads) arrived after the task that the first one caused had started.
func costOf(events []*historypb.HistoryEvent) (n, tasks, markers, idle int) {
	for i, ev := range events {
		switch {
		case ev.GetWorkflowTaskStartedEventAttributes() != nil:
			tasks++
		case ev.GetMarkerRecordedEventAttributes() != nil:
			markers++
		case ev.GetWorkflowTaskCompletedEventAttributes() != nil:
			if i+1 == len(events) || !isCommandEvent(events[i+1]) {
				idle++
			}
		}
	}
	return len(events), tasks, markers, idle
}

func isCommandEvent(ev *historypb.HistoryEvent) bool {
	return ev.GetActivityTaskScheduledEventAttributes() != nil || ev.GetMarkerRecordedEventAttributes() != nil ||
		ev.GetUpsertWorkflowSearchAttributesEventAttributes() != nil || ev.GetTimerStartedEventAttributes() != nil ||
		ev.GetWorkflowExecutionCompletedEventAttributes() != nil || ev.GetWorkflowExecutionFailedEventAttributes() != nil ||
		ev.GetWorkflowExecutionContinuedAsNewEventAttributes() != nil
}

// activityFailures lists the messages of a history's failed activity attempts, decrypted (failure
// messages are encrypted like payloads).
func (e *env) activityFailures(events []*historypb.HistoryEvent) []string {
	e.t.Helper()
	return e.decodeEach(events, func(dc converter.DataConverter, ev *historypb.HistoryEvent) (string, bool) {
		a := ev.GetActivityTaskFailedEventAttributes()
		if a == nil {
			return "", false
		}
		f := proto.Clone(a.GetFailure()).(*failurepb.Failure)
		converter.DecodeCommonFailureAttributes(dc, f)
		return f.GetMessage(), true
	})
}

// waitOutcome waits until a host's latest run has outcome and returns its detail.
func (e *env) waitOutcome(identity, outcome string) *operator.Detail {
	e.t.Helper()
	var d *operator.Detail
	require.Eventually(e.t, func() bool {
		var err error
		d, err = e.operator().Show(context.Background(), identity)
		return err == nil && d.Outcome == outcome && d.State != nil
	}, 90*time.Second, 250*time.Millisecond, "%s never reached %s", identity, outcome)
	return d
}

// waitFailed waits until exactly n hosts' latest runs failed and returns them.
func (e *env) waitFailed(n int) []operator.Host {
	e.t.Helper()
	var failed []operator.Host
	require.Eventually(e.t, func() bool {
		// the whole reason, read from each history (the listing's default is the error type)
		l, err := e.operator().ListPage(context.Background(), operator.Filter{Outcome: workflows.OutcomeFailed}, operator.Page{FullReasons: true})
		if err != nil {
			return false
		}
		failed = l.Hosts
		return len(l.Hosts) == n
	}, 90*time.Second, 250*time.Millisecond, "waiting for %d failed hosts", n)
	return failed
}
