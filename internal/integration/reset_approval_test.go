package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// afterHelpersAnswer is the workflow task that took the helper's answer: a reset to it replays
// that answer (same nonce, same seal) from the copied history.
func afterHelpersAnswer(t *testing.T, events []*historypb.HistoryEvent) int64 {
	t.Helper()
	helper := map[int64]bool{}
	answered := false
	for _, ev := range events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == activities.RunHelperName {
			helper[ev.GetEventId()] = true
		}
		if c := ev.GetActivityTaskCompletedEventAttributes(); c != nil && helper[c.GetScheduledEventId()] {
			answered = true
		}
		if answered && ev.GetWorkflowTaskCompletedEventAttributes() != nil {
			return ev.GetEventId()
		}
	}
	t.Fatal("no workflow task after the helper's answer")
	return 0
}

// The probe of issue #51: a provisioned run is reset to the workflow task that took the helper's
// answer, after the helper has come to refuse the host and a new server answers for the name with
// fresh keys. Before, the reset run signed a server JWT for the key its copied reads named and
// configured the new announcer. Now the sign step refuses a decision its run did not receive,
// nothing is signed or sent, the run reads the host and asks the helper again, and it ends as
// the helper now says (failed: the CA is down).
func TestIntegrationResetAfterTheHelpersAnswerSignsNothing(t *testing.T) {
	t.Parallel() // most of it waits on the reset run's retries
	e := newEnv(t, envOptions{servers: 0, helper: switchableHelper(t)})
	e.refusals = true
	_, stopA := e.replicaWith("replica-a", e.cfg, service.Options{Worker: true, Discovery: true})
	m, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	e.waitProvisioned(90*time.Second, m)
	id := workflows.WorkflowID(m.Identity)
	ctx := context.Background()
	desc, err := e.client.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	var done workflows.ProvisionResult
	require.NoError(t, e.client.GetWorkflow(ctx, id, runID).Get(ctx, &done))
	require.Equal(t, workflows.OutcomeProvisioned, done.Outcome)
	resetTo := afterHelpersAnswer(t, e.runHistory(id, runID))
	stopA()

	// the helper now refuses the host, and a new server answers for its name with fresh keys;
	// the worker that runs the reset run discovers nothing, so the reset run is the only run
	e.setFlag("helper-broken", true)
	announcer := e.reannounce(m, 0)
	b, _ := e.replicaWith("replica-b", e.cfg, service.Options{Worker: true})
	resp, err := e.client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: e.cfg.Temporal.Namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
		Reason: "test: reset to the helper's answer", WorkflowTaskFinishEventId: resetTo, RequestId: "reset-" + runID})
	require.NoError(t, err)
	err = e.client.GetWorkflow(ctx, id, resp.GetRunId()).Get(ctx, nil)
	events := e.runHistory(id, resp.GetRunId())
	t.Logf("RESET after the helper's answer: error %v; activity failures %q", err, e.activityFailures(events))
	require.Error(t, err, "the reset run ends as the helper now says")
	require.Contains(t, err.Error(), "CA is down")
	require.Empty(t, scheduledOf(events, activities.ConfigureName), "no configure sent")
	require.GreaterOrEqual(t, len(scheduledOf(events, activities.InventoryName)), 2, "the host read again past the reset point")
	require.Equal(t, 1.0, testutil.ToFloat64(b.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonStaleApproval)),
		"the sign step refused the replayed decision, once")
	require.False(t, devstack.Provisioned(announcer), "the new announcer holds no configuration")
	_, err = os.Stat(filepath.Join(announcer.Dir, "server.jwt"))
	require.True(t, os.IsNotExist(err), "nor a server JWT")
}
