package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/discovery"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/procstat"
)

// The flood's shape: forged startup events with new identities at floodEventRate (and one larger
// than discovery reads after every oversizedEvery of them) and floodRepliesPerSweep forged discovery replies to
// every sweep, for FLOOD_SECONDS (15 by default, as make test runs it; 60 by hand), while
// floodRealHosts simulated hosts arrive at floodArrivals a second.
const (
	floodEventRate       = 2000
	oversizedEvery       = 100
	floodRepliesPerSweep = 5000
	floodRealHosts       = 100
	floodArrivals        = 10
	// the provisioner's new_hosts_rate and new_hosts_burst, below the defaults (50, 500) so that
	// the forged names' runs drain within the test: each holds its reads' worker slots until they
	// give up (3 reads x 5 attempts x rpc_timeout, 2 s here)
	floodNewHostsRate  = 20
	floodNewHostsBurst = 100
)

func floodDuration(t *testing.T) time.Duration {
	t.Helper()
	s := 15
	if v := os.Getenv("FLOOD_SECONDS"); v != "" {
		var err error
		s, err = strconv.Atoi(v)
		require.NoError(t, err, "FLOOD_SECONDS")
	}
	return time.Duration(s) * time.Second
}

// floodResult is what one run cost and did.
type floodResult struct {
	took         time.Duration // from the first real host's arrival to the last one's restart
	temporalCPU  time.Duration // Temporal's CPU over the same time
	peakRSSMiB   float64       // the provisioner's
	forgedRuns   int
	oversizedRun int // runs of an oversized event's identity: none may exist
	sent         forgerCounts
	refused      map[string]float64
}

// A hostile fleet costs little: a flood of forged startup events and discovery replies starts at
// most burst + rate x (its duration + a sweep's handover) runs, oversized events are refused
// before any queue, and every real host arriving during it is provisioned, once. Its cost is
// reported against the same arrivals without a flood.
func TestIntegrationFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the Temporal dev server, a broker and simulated servers")
	}
	flood := floodDuration(t)
	var base, hostile floodResult
	t.Run("baseline", func(t *testing.T) { base = runFlood(t, 0) })
	t.Run("flood", func(t *testing.T) { hostile = runFlood(t, flood) })
	if t.Failed() {
		return
	}
	perHost := func(r floodResult) float64 { return r.temporalCPU.Seconds() * 1000 / floodRealHosts }
	t.Logf("FLOOD %v: %d events (%.0f/s, %d oversized), %d forged replies; %d real hosts provisioned in %v (baseline %v); "+
		"forged runs %d (bound %d); refused %v; Temporal CPU per real host %.0f ms (baseline %.0f ms, %.2fx); provisioner peak RSS %.0f MiB (baseline %.0f MiB)",
		flood, hostile.sent.events, float64(hostile.sent.events)/flood.Seconds(), hostile.sent.oversized, hostile.sent.replies,
		floodRealHosts, hostile.took.Round(time.Second), base.took.Round(time.Second), hostile.forgedRuns, forgedBound(flood), hostile.refused,
		perHost(hostile), perHost(base), perHost(hostile)/perHost(base), hostile.peakRSSMiB, base.peakRSSMiB)

	require.GreaterOrEqual(t, float64(hostile.sent.events)/flood.Seconds(), float64(floodEventRate)*0.95, "the flood was not a flood")
	require.Positive(t, hostile.sent.replies, "no sweep got forged replies")
	require.LessOrEqual(t, hostile.forgedRuns, forgedBound(flood), "more forged names started runs than the rate allows")
	require.Zero(t, hostile.oversizedRun, "an oversized event became a run")
	// each oversized event is refused for its size before any queue of discovery's, unless the NATS
	// client's own bounded buffer dropped it first (counted as full)
	require.LessOrEqual(t, hostile.refused[metrics.RefusedSize], float64(hostile.sent.oversized))
	require.GreaterOrEqual(t, hostile.refused[metrics.RefusedSize]+hostile.refused[metrics.RefusedFull], float64(hostile.sent.oversized),
		"an oversized event was neither refused nor counted")
	require.Positive(t, hostile.refused[metrics.RefusedSize])
	require.Positive(t, hostile.refused[metrics.RefusedRate])
	require.Zero(t, base.forgedRuns)
}

// forgedBound is what the new-hosts rate lets through in flood: the burst, and the rate for the
// flood and for the handover of the last sweep it answered (discovery.HandoverWindow after that
// sweep's 2 s discovery window).
func forgedBound(flood time.Duration) int {
	return floodNewHostsBurst + int(floodNewHostsRate*(flood+2*time.Second+discovery.HandoverWindow).Seconds())
}

func runFlood(t *testing.T, flood time.Duration) floodResult {
	e := newEnv(t, envOptions{ownTemporal: true})
	port, err := devstack.FreePort()
	require.NoError(t, err)
	prov := e.processProvisioner("replica-a", fmt.Sprintf("PROVISIONER_MONITOR_PORT=%d", port), "PROVISIONER_MONITOR_ADDRESS=127.0.0.1",
		fmt.Sprintf("PROVISIONER_NEW_HOSTS_RATE=%d", floodNewHostsRate), fmt.Sprintf("PROVISIONER_NEW_HOSTS_BURST=%d", floodNewHostsBurst),
		"PROVISIONER_RPC_TIMEOUT=2s")
	require.Eventually(t, func() bool { return strings.Contains(readLog(e, "replica-a.log"), "listening for startup events") },
		60*time.Second, 100*time.Millisecond, "discovery did not subscribe to startup events")

	var f *forger
	if flood > 0 {
		f = startForger(t, e, flood)
	}
	cpu0 := procstat.TreeCPU(e.stack.Temporal.PID())
	began := time.Now()
	status := e.startFleetSim(floodRealHosts, "--prefix", "real-", "--rate", fmt.Sprint(floodArrivals))
	st := waitSimRestarted(t, status, floodRealHosts, 10*time.Minute)
	res := floodResult{took: time.Since(began), temporalCPU: procstat.TreeCPU(e.stack.Temporal.PID()) - cpu0,
		peakRSSMiB: procstat.PeakRSSMiB(prov.pid())}
	if f != nil {
		res.sent = f.wait()
	}
	require.Zero(t, e.simTally(st), "a real host was configured other than once")
	for id, n := range e.runCounts() {
		switch {
		case strings.HasPrefix(id, "provision:forged-"):
			res.forgedRuns += n
		case strings.HasPrefix(id, "provision:oversized-"):
			res.oversizedRun += n
		}
	}
	if flood > 0 {
		// the summary comes once an interval (1 m): the flood's first one may be still to come
		require.Eventually(t, func() bool {
			return strings.Contains(readLog(e, "replica-a.log"), "found again by the next discovery sweep")
		},
			90*time.Second, time.Second, "no summary of the refusals")
	}
	res.refused = scrapeRefused(t, port)
	log := readLog(e, "replica-a.log")
	// what an operator reads: each sweep and each summary of the refusals
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"discovery sweep"`) || strings.Contains(l, "sightings refused") {
			t.Log(l)
		}
	}
	return res
}

func readLog(e *env, name string) string {
	b, _ := os.ReadFile(e.stack.Opts.Dir + "/" + name)
	return string(b)
}

var refusedLine = regexp.MustCompile(`^choria_provisioner_sightings_refused_total\{reason="(\w+)",site="[^"]*"\} (\S+)$`)

// scrapeRefused reads the provisioner's refusals from its /metrics.
func scrapeRefused(t *testing.T, port int) map[string]float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	require.NoError(t, err)
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := refusedLine.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]], _ = strconv.ParseFloat(m[2], 64)
		}
	}
	require.NoError(t, sc.Err())
	require.Len(t, out, len(metrics.RefusedReasons()), "the refusal series are not all on /metrics")
	return out
}

// forger is a host with the broker's provisioning credentials, which any server in provisioning
// mode holds: it publishes startup events of names of its own and answers every discovery sweep
// with replies from such names, as fast as the flood asks.
type forger struct {
	nc     *nats.Conn
	until  time.Time
	wg     sync.WaitGroup
	counts struct{ events, oversized, replies, sweeps atomic.Int64 }
}

type forgerCounts struct{ events, oversized, replies, sweeps int64 }

func startForger(t *testing.T, e *env, d time.Duration) *forger {
	t.Helper()
	jwt, err := os.ReadFile(e.stack.Creds.ProvisioningJWT)
	require.NoError(t, err)
	nc, err := nats.Connect(e.stack.Broker.URL, nats.Token(strings.TrimSpace(string(jwt))), nats.Secure(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // as a server in provisioning mode connects
		nats.CustomInboxPrefix("provisioning.reply.forger"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	f := &forger{nc: nc, until: time.Now().Add(d)}
	// the sweep's request names its reply subject in its transport's headers
	_, err = nc.Subscribe("provisioning.broadcast.agent.discovery", func(m *nats.Msg) {
		var tm struct {
			Headers struct {
				Reply string `json:"reply"`
			} `json:"headers"`
		}
		if time.Now().After(f.until) || json.Unmarshal(m.Data, &tm) != nil || tm.Headers.Reply == "" {
			return
		}
		f.wg.Add(1)
		go f.reply(tm.Headers.Reply, f.counts.sweeps.Add(1))
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	f.wg.Add(1)
	go f.events()
	return f
}

// reply answers one sweep with floodRepliesPerSweep replies of forged senders; discovery reads
// a reply's sender from its transport's headers.
func (f *forger) reply(subject string, sweep int64) {
	defer f.wg.Done()
	for i := range floodRepliesPerSweep {
		msg := fmt.Appendf(nil, `{"protocol":"io.choria.protocol.v2.transport","data":"e30=","headers":{"sender":"forged-r%d-%d.flood"}}`, sweep, i)
		if f.nc.Publish(subject, msg) == nil {
			f.counts.replies.Add(1)
		}
	}
}

// events publishes forged startup events at floodEventRate until the flood ends.
func (f *forger) events() {
	defer f.wg.Done()
	const subject = "choria.lifecycle.event.startup.provision_mode_server"
	padding := strings.Repeat("9", discovery.MaxEventSize)
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var n int64
	for now := range tick.C {
		if now.After(f.until) {
			return
		}
		// floodEventRate of new names a second, and one oversized event after every oversizedEvery
		for due := int64(now.Sub(start).Seconds() * floodEventRate * (oversizedEvery + 1) / oversizedEvery); n < due; n++ {
			oversized := n%(oversizedEvery+1) == oversizedEvery
			name, version := fmt.Sprintf("forged-e%d.flood", n), "0.30.2"
			if oversized {
				name, version = fmt.Sprintf("oversized-e%d.flood", n), padding
			}
			ev := fmt.Appendf(nil, `{"protocol":"io.choria.lifecycle.v1.startup","identity":%q,"component":"provision_mode_server","id":"2aYh6yTFZxkqg9nV4gOO7tM2Dn3","timestamp":%d,"version":%q}`,
				name, now.Unix(), version)
			if f.nc.Publish(subject, ev) != nil {
				continue
			}
			if oversized {
				f.counts.oversized.Add(1)
			} else {
				f.counts.events.Add(1)
			}
		}
	}
}

// wait waits for the flood to end and says what it sent.
func (f *forger) wait() forgerCounts {
	f.wg.Wait()
	_ = f.nc.Flush()
	return forgerCounts{events: f.counts.events.Load(), oversized: f.counts.oversized.Load(),
		replies: f.counts.replies.Load(), sweeps: f.counts.sweeps.Load()}
}

// Hostile lifecycle events, published on the broker as any server in provisioning mode could:
// not JSON, the wrong type, and identities that are empty, 10 kB long, full of control characters
// or NATS wildcards. None becomes a workflow, the service keeps running, and a real server that
// arrives afterwards is provisioned.
func TestIntegrationHostileLifecycleEvents(t *testing.T) {
	e := newEnv(t, envOptions{servers: 0})
	e.provisioner("replica-a")
	require.Eventually(t, func() bool { return strings.Contains(tail(t, e, "replica-a.log"), "listening for startup events") },
		20*time.Second, 100*time.Millisecond, "discovery did not subscribe to startup events")

	jwt, err := os.ReadFile(e.stack.Creds.ProvisioningJWT)
	require.NoError(t, err)
	nc, err := nats.Connect(e.stack.Broker.URL, nats.Token(string(jwt)), nats.Secure(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // as a server in provisioning mode connects
	require.NoError(t, err)
	defer nc.Close()

	event := func(typ, identity, component string) []byte {
		b, err := json.Marshal(map[string]any{"protocol": "io.choria.lifecycle.v1." + typ, "identity": identity, "component": component,
			"id": "2aYh6yTFZxkqg9nV4gOO7tM2Dn3", "timestamp": time.Now().Unix(), "version": "0.30.2"})
		require.NoError(t, err)
		return b
	}
	subject := "choria.lifecycle.event.startup.provision_mode_server"
	hostile := [][]byte{
		[]byte("this is not JSON"),
		{},
		event("shutdown", "hostile-shutdown.example", "provision_mode_server"),
		event("startup", "", "provision_mode_server"),
		event("startup", strings.Repeat("a", 10<<10), "provision_mode_server"),
		event("startup", "bad\x07\x1b[2Jname", "provision_mode_server"),
		event("startup", "wild.*", "provision_mode_server"),
		event("startup", ">", "provision_mode_server"),
		event("startup", "two words", "provision_mode_server"),
	}
	for _, data := range hostile {
		require.NoError(t, nc.Publish(subject, data))
	}
	require.NoError(t, nc.Flush())

	// a real server afterwards is provisioned: the service survived
	require.NoError(t, e.stack.Fleet.StartN(1))
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	e.runs(e.stack.Fleet.Members[0].Identity, 1)

	resp, err := e.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: "TaskQueue = '" + e.cfg.Temporal.TaskQueue + "'"})
	require.NoError(t, err)
	require.Len(t, resp.Executions, 1, "no workflow may start for a hostile event")

	log := tail(t, e, "replica-a.log")
	require.Contains(t, log, "dropping lifecycle event")
	require.Contains(t, log, "invalid identity")
}

func tail(t *testing.T, e *env, name string) string {
	t.Helper()
	b, err := os.ReadFile(e.stack.Opts.Dir + "/" + name)
	require.NoError(t, err)
	return string(b)
}
