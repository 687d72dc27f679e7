package integration

import (
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/workflows"
)

// helper_rate_limit: helper calls go to their own task queue, which Temporal's matching service
// dispatches at most that often whatever the number of hosts waiting.
func TestIntegrationHelperRateLimit(t *testing.T) {
	const hosts, rate = 12, 2.0
	e := newEnv(t, envOptions{extraConfig: "helper_rate_limit: 2\n"})
	status := e.startFleetSim(hosts, "--prefix", "ratelimit-", "--no-restart-splay")
	e.provisioner("replica-a")
	st := waitSimRestarted(t, status, hosts, 2*time.Minute)

	var starts []time.Time
	for id := range st.Hosts {
		var scheduled time.Time
		for _, ev := range e.history(id) {
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == activities.RunHelperName {
				require.Equal(t, workflows.HelperTaskQueue(e.cfg.Temporal.TaskQueue), a.GetTaskQueue().GetName(), "%s: helper call not on the rate-limited queue", id)
				scheduled = ev.GetEventTime().AsTime()
			}
			if ev.GetEventType() == enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED && !scheduled.IsZero() {
				starts = append(starts, ev.GetEventTime().AsTime())
				scheduled = time.Time{}
			}
		}
	}
	require.Len(t, starts, hosts)
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	span := starts[len(starts)-1].Sub(starts[0])
	// 12 calls at 2/s cannot start within less than ~5.5 s; allow the limiter a burst of a few
	minSpan := time.Duration(float64(hosts-4) / rate * float64(time.Second))
	t.Logf("%d helper calls started over %v at helper_rate_limit %.0f/s (%.2f/s)", hosts, span.Round(10*time.Millisecond), rate, float64(hosts-1)/span.Seconds())
	require.GreaterOrEqual(t, span, minSpan, "helper calls were not rate limited")
}

// temporal.fast_mode: every step but configure a local activity (configure stays regular, so the
// run's decisions are recorded before it acts on the host), two workflow tasks per host, the
// same outcome, status and timeline; the local steps are markers in the history.
func TestIntegrationFastMode(t *testing.T) {
	e, st := provisionSim(t, "fast-", func(c *config.Temporal) { c.FastMode = true })
	var last string
	for id, h := range st.Hosts {
		require.True(t, h.ServerJWT, id)
		require.Equal(t, int32(1), h.Configures, id)
		history := e.history(id)
		require.Equal(t, []string{activities.ConfigureName}, scheduled(history), "%s: configure alone regular", id)
		require.ElementsMatch(t, []string{activities.FetchJWTName, activities.Gen25519Name, activities.InventoryName,
			activities.RunHelperName, activities.SignServerJWTName, activities.RestartName},
			e.localActivities(history), id)
		events, tasks, _, idle := costOf(history)
		t.Logf("%s: %d history events, %d workflow tasks (%d idle)", id, events, tasks, idle)
		require.LessOrEqual(t, tasks-idle, 2, id)
		d := e.waitOutcome(id, workflows.OutcomeProvisioned)
		require.Len(t, d.State.Timeline, 7, "the status query shows every step")
		last = id
	}
	e.writeReplayHistory("provision-fast", last)
}

// provisionSim provisions ten simulated hosts with the Temporal settings tune makes.
func provisionSim(t *testing.T, prefix string, tune func(*config.Temporal)) (*env, fleetsim.Status) {
	t.Helper()
	e := newEnv(t, envOptions{})
	tune(&e.cfg.Temporal)
	status := e.startFleetSim(10, "--prefix", prefix)
	e.provisioner("replica-a")
	return e, waitSimRestarted(t, status, 10, 2*time.Minute)
}

// temporal.workflow_cache_size: a worker that can keep only one run in memory replays the others
// from their histories at their next tasks, and every host is still provisioned once, by one
// run. Its own process: the SDK sizes one cache per process, at its first worker.
func TestIntegrationWorkflowCacheEvictionsReplay(t *testing.T) {
	// the provisioner process reads these
	t.Setenv("PROVISIONER_TEMPORAL__WORKFLOW_CACHE_SIZE", "1")
	e := newEnv(t, envOptions{servers: 6})
	// probed once the stack is up, just before the provisioner binds it: the stack's own
	// processes could take a port probed before they started
	port, err := devstack.FreePort()
	require.NoError(t, err)
	t.Setenv("PROVISIONER_MONITOR_PORT", strconv.Itoa(port))
	started := time.Now()
	e.processProvisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	e.tally("workflow cache of 1", started)

	// the SDK's own count of tasks whose run it no longer held
	x, err := scrape(port)
	require.NoError(t, err)
	misses, evictions := x.sum("temporal_sticky_cache_miss_total"), x.sum("temporal_sticky_cache_forced_eviction_total")
	size := -1.0
	for _, v := range x.values("temporal_sticky_cache_size") {
		size = max(size, v)
	}
	t.Logf("workflow cache of 1, %d hosts: %.0f runs evicted, %.0f workflow tasks replayed their run, cache size %.0f",
		len(e.stack.Fleet.Members), evictions, misses, size)
	// (a run leaves the cache when it ends, too: evictions alone say nothing)
	require.Positive(t, misses, "no task replayed its run: the cache size did not apply")
	require.LessOrEqual(t, size, 1.0)
}
