package integration

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

// fullFlow is what an ed25519 run schedules as regular activities: the reads together, then
// the helper, configure and restart; sign is a local activity.
var fullFlow = []string{activities.FetchJWTName, activities.Gen25519Name, activities.InventoryName, activities.RunHelperName,
	activities.ConfigureName, activities.RestartName}

// maxEventsPerHost is issue #11's budget for a host's history with every RPC step and helper
// call a regular activity (59 before the reads were scheduled together).
const maxEventsPerHost = 40

// Five real go-choria servers in provisioning mode are found by discovery and provisioned, each
// by exactly one workflow whose history shows the steps.
func TestIntegrationProvisionFleet(t *testing.T) {
	e := newEnv(t, envOptions{servers: 5})
	// the provisioner announces itself as the Choria Provisioner does; lifecycle events of the
	// provisioning account reach the fleet's account, where an administrator can watch them
	adminCfg := *e.cfg
	adminCfg.ChoriaConfig, adminCfg.BrokerProvisioningPassword = e.stack.AdminConfig, ""
	adminFW, err := service.NewChoriaClientFramework(&adminCfg, "")
	require.NoError(t, err)
	conn, err := adminFW.NewConnector(context.Background(), adminFW.MiddlewareServers, "it-admin", adminFW.Logger("it"))
	require.NoError(t, err)
	defer conn.Close()
	events, err := conn.Nats().SubscribeSync("choria.lifecycle.event.startup.provisioner")
	require.NoError(t, err)
	require.NoError(t, conn.Nats().Flush())

	start := time.Now()
	svc := e.provisioner("replica-a")
	msg, err := events.NextMsg(10 * time.Second)
	require.NoError(t, err, "the provisioner's startup event")
	require.Contains(t, string(msg.Data), `"component":"provisioner"`)
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	t.Logf("5 servers provisioned and restarted in %v", time.Since(start))

	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m)
		e.runs(m.Identity, 1)
		hist := e.history(m.Identity)
		require.Equal(t, e.cfg.Temporal.TaskQueue, helperQueue(hist), "%s: without helper_rate_limit the helper stays on the run's queue", m.Identity)
		require.ElementsMatch(t, fullFlow[:3], scheduled(hist)[:3], m.Identity)
		require.Equal(t, fullFlow[3:], scheduled(hist)[3:], m.Identity)
		require.Equal(t, []string{activities.SignServerJWTName}, e.localActivities(hist), m.Identity)
		events, tasks, markers, idle := costOf(hist)
		t.Logf("%s: %d history events, %d workflow tasks (%d idle), %d markers", m.Identity, events, tasks, idle, markers)
		// an idle task (3 events) is the server's when a read's result comes after the task the
		// first one caused has started; what the workflow issues is budgeted
		require.LessOrEqual(t, events-3*idle, maxEventsPerHost, m.Identity)
		require.LessOrEqual(t, idle, 2, "%s: at most one idle task per later read", m.Identity)
	}
	e.writeReplayHistory("provision-ed25519", e.stack.Fleet.Members[0].Identity)
	require.Equal(t, 5.0, testutil.ToFloat64(svc.Metrics.Provisioned.WithLabelValues("dev")))
	require.Equal(t, 0.0, testutil.ToFloat64(svc.Metrics.ProvisionErrors.WithLabelValues("dev")))
	// servers still starting when the first sweep runs are found by their startup events instead
	sightings := testutil.ToFloat64(svc.Metrics.Discovered.WithLabelValues("dev")) + testutil.ToFloat64(svc.Metrics.EventDiscovered.WithLabelValues("dev"))
	require.GreaterOrEqual(t, sightings, 5.0)
	require.Equal(t, 5, testutil.CollectAndCount(svc.Metrics.RPCTime, "choria_provisioner_rpc_time"))
	require.Equal(t, 0.0, testutil.ToFloat64(svc.Metrics.BusyWorkers.WithLabelValues("dev")), "no step runs once all are provisioned")
}

// One host's helper defers, then exits 1, then prints garbage: that host recovers by retry in
// its own workflow without waiting for a discovery sweep, the reasons are in its history, and the
// other hosts see none of it.
func TestIntegrationHelperFailsOnceForOneHost(t *testing.T) {
	var flaky string
	e := newEnv(t, envOptions{servers: 3, helper: func(s *devstack.Stack) string {
		flaky = s.Fleet.Identity(1)
		script := filepath.Join(s.Opts.Dir, "flaky-helper.sh")
		body := fmt.Sprintf(`#!/bin/sh
# defer, then exit 1, then garbage, then the real helper, for %[1]s only
input=$(cat)
case "$input" in
*'"identity":"%[1]s"'*)
  n=$(cat %[2]s/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[2]s/count
  case $n in
  1) echo '{"defer":true,"msg":"waiting for the CMDB"}'; exit 0;;
  2) echo "CA unreachable" >&2; exit 1;;
  3) echo 'this is not json'; exit 0;;
  esac;;
esac
printf '%%s' "$input" | %[3]s
`, flaky, s.Opts.Dir, s.HelperCommand)
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	start := time.Now()
	svc := e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	elapsed := time.Since(start)
	t.Logf("all provisioned in %v, flaky host included", elapsed)
	require.Less(t, elapsed, e.cfg.IntervalDuration, "recovery must not wait for the next discovery sweep")
	// a host that fails and recovers: its failed helper runs counted, no provisioning error
	require.Equal(t, 2.0, testutil.ToFloat64(svc.Metrics.HelperErrors.WithLabelValues("dev")))
	require.Equal(t, 0.0, testutil.ToFloat64(svc.Metrics.ProvisionErrors.WithLabelValues("dev")))
	require.Equal(t, 3.0, testutil.ToFloat64(svc.Metrics.Provisioned.WithLabelValues("dev")))
	require.Zero(t, e.logLines("replica-a", "no retries left"))
	require.Equal(t, 2, e.logLines("replica-a", `"level":"warn"`, "step failed, will retry", `"step":"helper"`))

	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m)
		e.runs(m.Identity, 1)
		hist := e.history(m.Identity)
		if m.Identity != flaky {
			require.Equal(t, fullFlow, scheduled(hist), m.Identity)
			require.Empty(t, e.activityFailures(hist), m.Identity)
			continue
		}
		failures := e.activityFailures(hist)
		require.Len(t, failures, 2, "%v", failures)
		require.Contains(t, failures[0], "non-zero status")
		require.Contains(t, failures[0], "CA unreachable")
		require.Contains(t, failures[1], "not a JSON object")
		timers := 0
		for _, ev := range hist {
			if ev.GetTimerStartedEventAttributes() != nil {
				timers++
			}
		}
		require.GreaterOrEqual(t, timers, 1, "the defer must wait on a durable timer")
		e.writeReplayHistory("provision-defer-helper-failures", m.Identity)
	}
}

// Two replicas run discovery and workers at once: every host is provisioned exactly once.
func TestIntegrationTwoReplicasProvisionEachHostOnce(t *testing.T) {
	e := newEnv(t, envOptions{servers: 5})
	a := e.provisioner("replica-a")
	b := e.provisioner("replica-b")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m)
		e.runs(m.Identity, 1)
		require.Equal(t, fullFlow, scheduled(e.history(m.Identity)), m.Identity)
	}
	total := testutil.ToFloat64(a.Metrics.Provisioned.WithLabelValues("dev")) + testutil.ToFloat64(b.Metrics.Provisioned.WithLabelValues("dev"))
	require.Equal(t, 5.0, total, "restart ran once per host across both replicas")
}
