package integration

import (
	"context"
	"os"
	"sort"
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

	// re-image the old hosts and start new ones while no provisioner runs
	fw, err := service.NewChoriaClientFramework(e.cfg, "")
	require.NoError(t, err)
	var hosts []*devstack.FleetMember
	for i, m := range old {
		require.Eventually(t, func() bool { return runningProvisioned(m) }, 30*time.Second, 100*time.Millisecond, "%s restarted provisioned", m.Identity)
		m.Kill()
		require.NoError(t, os.RemoveAll(m.Dir))
		again, err := e.stack.Fleet.Start(i)
		require.NoError(t, err)
		hosts = append(hosts, again)
	}
	for i := len(old); i < len(old)+2; i++ {
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
	// a real re-image takes longer than the restart window; a sighting within it is an echo of the
	// restart as far as discovery can tell, dropped as stale and found by a sweep brought forward
	// (TestStalenessByRestartTime), not the first one this test is about
	time.Sleep(time.Until(restartedBy.Add(workflows.RestartWindow(0) + 100*time.Millisecond)))
	t.Logf("provisioner down for %v", time.Since(stopped).Round(100*time.Millisecond))

	started := time.Now()
	svc := e.provisioner("replica-b")
	e.waitProvisioned(e.cfg.IntervalDuration, hosts...)
	waits := map[string]time.Duration{}
	var worst time.Duration
	for i, m := range hosts {
		want := 1
		if i < len(old) {
			want = 2 // the first provisioner's run, then this one
		}
		e.runs(m.Identity, want)
		resp, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(m.Identity), "")
		require.NoError(t, err)
		w := resp.GetWorkflowExecutionInfo().GetStartTime().AsTime().Sub(started)
		waits[m.Identity] = w
		worst = max(worst, w)
		e.verifyServerJWT(m)
	}
	ids := make([]string, 0, len(waits))
	for id := range waits {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t.Logf("RESTART WINDOW %s: run started %v after the provisioner did", id, waits[id].Round(10*time.Millisecond))
	}
	t.Logf("RESTART WINDOW: %d hosts (%d re-imaged, %d new), all provisioned %v after the provisioner started; the slowest run started after %v; stale sightings %v",
		len(hosts), len(old), len(hosts)-len(old), time.Since(started).Round(100*time.Millisecond), worst.Round(10*time.Millisecond),
		testutil.ToFloat64(svc.Metrics.StaleSightings.WithLabelValues("dev")))
	require.Zero(t, testutil.ToFloat64(svc.Metrics.StaleSightings.WithLabelValues("dev")), "no sighting of the first sweep is stale")
	require.Less(t, worst, e.cfg.IntervalDuration/4, "hosts seen in the first sweep must not wait for the next one")
}
