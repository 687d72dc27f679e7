package integration

import (
	"context"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// restarted reports whether a host's latest run has its restart RPC done: completed (its result
// carries RestartedAt), or still open with the restart activity completed and the run's last
// workflow task not yet run (a provisioner stopped then leaves it until another one runs it).
func (e *env) restarted(identity string) bool {
	resp, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(identity), "")
	if err != nil {
		return false
	}
	if st := resp.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return st == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}
	hist := e.history(identity)
	for _, ev := range hist {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == activities.RestartName {
			for _, later := range hist {
				if later.GetActivityTaskCompletedEventAttributes().GetScheduledEventId() == ev.GetEventId() {
					return true
				}
			}
		}
	}
	return false
}

// The provisioner stops as soon as its hosts are restarted, some runs perhaps still open; while it is down those
// hosts are re-imaged (back in provisioning mode, same identities) and new hosts start; then it
// starts again. Its first sweep finds them all, and none is judged stale because its previous run
// closed after that sweep began: every host is started from the first sweep, not the next
// interval.
func TestIntegrationRestartWindowDoesNotDelayHosts(t *testing.T) {
	e, svc, hosts, worst, _ := restartWindow(t, true)
	t.Logf("RESTART WINDOW: %d hosts (3 re-imaged, %d new), the slowest run started after %v; stale sightings %v",
		len(hosts), len(hosts)-3, worst.Round(10*time.Millisecond), testutil.ToFloat64(svc.Metrics.StaleSightings.WithLabelValues("dev")))
	require.Zero(t, testutil.ToFloat64(svc.Metrics.StaleSightings.WithLabelValues("dev")), "no sighting of the first sweep is stale")
	require.Less(t, worst, e.cfg.IntervalDuration/4, "hosts seen in the first sweep must not wait for the next one")
}

// The same, the old hosts re-imaged right after their restart RPCs, before they restart: the
// provisioner's first sweep falls inside the restart window, discovery cannot tell their
// sightings from echoes of the restarts and drops them as stale, and the sweep it brings forward
// finds them seconds later, not an interval later.
func TestIntegrationReimagedInRestartWindowFoundSoon(t *testing.T) {
	e, svc, hosts, worst, readyAfter := restartWindow(t, false)
	stale := testutil.ToFloat64(svc.Metrics.StaleSightings.WithLabelValues("dev"))
	t.Logf("RESTART WINDOW (re-imaged inside it): %d hosts, the provisioner ready %v after the restart RPCs, the slowest run started after %v; stale sightings %v",
		len(hosts), readyAfter.Round(100*time.Millisecond), worst.Round(10*time.Millisecond), stale)
	// its first sweep begins as it is ready: a second before the window ends, that sweep is in it
	if readyAfter < workflows.RestartWindow(0)-time.Second {
		require.Positive(t, stale, "a re-imaged host's sighting in the window is stale")
	}
	require.Less(t, worst, e.cfg.IntervalDuration/2, "a host dropped as stale waited for the next interval's sweep")
}

// restartWindow provisions three real servers with a provisioner of its own process, stops it as
// soon as their restart RPCs are done, re-images them (once they restarted and after the restart
// window when afterWindow, else at once) and starts two new servers, then starts a provisioner
// again and waits for all five. It returns how long after that provisioner started the slowest
// host's run started, and when that provisioner was ready after the restart RPCs.
func restartWindow(t *testing.T, afterWindow bool) (*env, *service.Service, []*devstack.FleetMember, time.Duration, time.Duration) {
	e := newEnv(t, envOptions{servers: 3})
	old := append([]*devstack.FleetMember(nil), e.stack.Fleet.Members...)
	first := e.processProvisioner("replica-a")
	require.Eventually(t, func() bool {
		for _, m := range old {
			if !e.restarted(m.Identity) {
				return false
			}
		}
		return true
	}, 90*time.Second, 50*time.Millisecond, "hosts never restarted")
	restartedBy := time.Now()
	_, err := first.stop(60 * time.Second)
	require.NoError(t, err)
	stopped := time.Now()
	hosts := e.reimage(old, 2, afterWindow)
	if afterWindow {
		// a real re-image takes longer than the restart window
		time.Sleep(time.Until(restartedBy.Add(workflows.RestartWindow(0) + 100*time.Millisecond)))
	}
	t.Logf("provisioner down for %v, from the restart RPCs %v", time.Since(stopped).Round(100*time.Millisecond), time.Since(restartedBy).Round(100*time.Millisecond))

	started := time.Now()
	svc := e.provisioner("replica-b")
	readyAfter := time.Since(restartedBy)
	e.waitProvisioned(e.cfg.IntervalDuration, hosts...)
	waits := map[string]time.Duration{}
	for i, m := range hosts {
		want := 1
		if i < len(old) {
			want = 2 // the first provisioner's run, then this one
		}
		e.runs(m.Identity, want)
		resp, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(m.Identity), "")
		require.NoError(t, err)
		waits[m.Identity] = resp.GetWorkflowExecutionInfo().GetStartTime().AsTime().Sub(started)
		e.verifyServerJWT(m)
	}
	ids := slices.Sorted(maps.Keys(waits))
	for _, id := range ids {
		t.Logf("RESTART WINDOW %s: run started %v after the provisioner did", id, waits[id].Round(10*time.Millisecond))
	}
	return e, svc, hosts, slices.Max(slices.Collect(maps.Values(waits))), readyAfter
}

// reimage kills the servers (once they run provisioned when restarted) and starts them again in
// provisioning mode with the same identities, then starts fresh more; it returns them all once
// each answers in provisioning mode.
func (e *env) reimage(old []*devstack.FleetMember, fresh int, restarted bool) []*devstack.FleetMember {
	t := e.t
	fw, err := service.NewChoriaClientFramework(e.cfg, "")
	require.NoError(t, err)
	var hosts []*devstack.FleetMember
	for i, m := range old {
		if restarted {
			require.Eventually(t, func() bool { return runningProvisioned(m) }, 30*time.Second, 100*time.Millisecond, "%s restarted provisioned", m.Identity)
		}
		m.Kill()
		require.NoError(t, os.RemoveAll(m.Dir))
		again, err := e.stack.Fleet.Start(i)
		require.NoError(t, err)
		hosts = append(hosts, again)
	}
	for i := len(old); i < len(old)+fresh; i++ {
		m, err := e.stack.Fleet.Start(i)
		require.NoError(t, err)
		hosts = append(hosts, m)
	}
	for _, m := range hosts {
		require.Eventually(t, func() bool {
			return call(t, fw, "provisioning", m.Identity, "rpcutil", "ping", nil, time.Second) != nil
		},
			30*time.Second, 200*time.Millisecond, "%s answers in provisioning mode", m.Identity)
	}
	return hosts
}
