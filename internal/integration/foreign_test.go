package integration

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// A client of the namespace that holds no codec key starts ProvisionHost for a real server in
// provisioning mode with an input of its own: the JWT check switched off, then the helper call
// sent to a queue it polls and answers with claims of its choosing; then with an encrypted input
// copied from another host's history. Every run fails naming the refusal before its first step:
// no helper of the attacker's is asked, nothing is signed, the server is not configured.
func TestIntegrationForeignInputRefused(t *testing.T) {
	e := newEnv(t, envOptions{servers: 2})
	e.refusals = true                                              // this test's runs are refused on purpose
	svc := e.replica("worker-only", service.Options{Worker: true}) // no discovery: only these runs start
	victim, other := e.stack.Fleet.Members[0], e.stack.Fleet.Members[1]
	ctx := context.Background()

	plain, err := client.Dial(client.Options{HostPort: e.cfg.Temporal.Address, Namespace: e.cfg.Temporal.Namespace})
	require.NoError(t, err)
	defer plain.Close()
	var asked atomic.Int32
	const attackerQueue = "attacker-helper"
	w := worker.New(plain, attackerQueue, worker.Options{})
	w.RegisterActivityWithOptions(func(context.Context, map[string]any) (map[string]any, error) {
		asked.Add(1)
		return map[string]any{"configuration": map[string]string{"identity": "intruder.example"},
			"server_claims": map[string]any{"collectives": []string{"choria"}}}, nil
	}, activity.RegisterOptions{Name: activities.RunHelperName})
	require.NoError(t, w.Start())
	defer w.Stop()

	refused := func(what string, start func() (client.WorkflowRun, error)) {
		t.Helper()
		run, err := start()
		require.NoError(t, err, what)
		// the failure is read through the codec, as an operator reads it
		err = e.client.GetWorkflow(ctx, run.GetID(), run.GetRunID()).Get(ctx, nil)
		require.Error(t, err, what)
		require.Contains(t, strings.ToLower(err.Error()), "refused", "%s: the failure names the refusal: %v", what, err)
		for _, ev := range e.historyOfRun(run.GetID(), run.GetRunID()) {
			require.Nil(t, ev.GetActivityTaskScheduledEventAttributes(), "%s: no step was scheduled", what)
			require.Nil(t, ev.GetMarkerRecordedEventAttributes(), "%s: nothing ran, not even the policy's side effect", what)
		}
		t.Logf("FOREIGN %s: refused: %v", what, err)
	}
	opts := client.StartWorkflowOptions{ID: workflows.WorkflowID(victim.Identity), TaskQueue: e.cfg.Temporal.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE}
	refused("features.jwt=false", func() (client.WorkflowRun, error) {
		return plain.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, map[string]any{"identity": victim.Identity, "source": "event",
			"features": map[string]bool{"jwt": false, "ed25519": true}})
	})
	refused("helper_task_queue of the attacker's", func() (client.WorkflowRun, error) {
		return plain.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, map[string]any{"identity": victim.Identity, "source": "event",
			"helper_task_queue": attackerQueue})
	})

	// another host provisioned by a run of ours; its encrypted input copied into a run of the victim
	in := workflows.ProvisionInput{Identity: other.Identity, Source: workflows.SourceOperator}
	good, err := e.client.ExecuteWorkflow(ctx, service.Starter(e.cfg).Options(in), workflows.WorkflowName, in)
	require.NoError(t, err)
	require.NoError(t, good.Get(ctx, nil))
	var copied *commonpb.Payloads
	for _, ev := range e.historyOfRun(good.GetID(), good.GetRunID()) {
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			copied = a.GetInput()
		}
	}
	require.NotNil(t, copied)
	refused("another host's encrypted input", func() (client.WorkflowRun, error) {
		resp, err := plain.WorkflowService().StartWorkflowExecution(ctx, &workflowservice.StartWorkflowExecutionRequest{
			Namespace: e.cfg.Temporal.Namespace, WorkflowId: workflows.WorkflowID(victim.Identity), RequestId: "copied-input",
			WorkflowType: &commonpb.WorkflowType{Name: workflows.WorkflowName}, TaskQueue: &taskqueuepb.TaskQueue{Name: e.cfg.Temporal.TaskQueue},
			Input: copied, WorkflowIdReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE})
		if err != nil {
			return nil, err
		}
		return plain.GetWorkflow(ctx, workflows.WorkflowID(victim.Identity), resp.GetRunId()), nil
	})

	require.Zero(t, asked.Load(), "the attacker's helper queue got no task")
	time.Sleep(2 * time.Second) // what a configure sent would have written by now
	require.False(t, devstack.Provisioned(victim), "the victim was not configured")
	require.Equal(t, 1.0, testutil.ToFloat64(svc.Metrics.Provisioned.WithLabelValues("dev")), "only the host of our own run")
	require.GreaterOrEqual(t, refusedTotal(t, svc), 3.0, "each refusal counted")
}

// historyOfRun is one run's history, as the server holds it (payloads not decoded).
func (e *env) historyOfRun(workflowID, runID string) []*historypb.HistoryEvent {
	e.t.Helper()
	var events []*historypb.HistoryEvent
	it := e.client.GetWorkflowHistory(context.Background(), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(e.t, err)
		events = append(events, ev)
	}
	return events
}
