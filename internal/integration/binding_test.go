package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// completedResults are the encrypted results a run's activities completed with, by activity type.
func completedResults(events []*historypb.HistoryEvent) map[string]*commonpb.Payloads {
	types := map[int64]string{}
	out := map[string]*commonpb.Payloads{}
	for _, ev := range events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			types[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if c := ev.GetActivityTaskCompletedEventAttributes(); c != nil {
			out[types[c.GetScheduledEventId()]] = c.GetResult()
		}
	}
	return out
}

// inFlight waits until the host's open run has scheduled activity (and not yet closed it) and
// returns the run and the activity's ID, as a namespace client reads them from history.
func (e *env) inFlight(identity, activity string, timeout time.Duration) (runID, activityID string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		resp, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(identity), "")
		if err != nil {
			return false
		}
		for _, pa := range resp.GetPendingActivities() {
			if pa.GetActivityType().GetName() == activity {
				runID, activityID = resp.GetWorkflowExecutionInfo().GetExecution().GetRunId(), pa.GetActivityId()
				return true
			}
		}
		return false
	}, timeout, 50*time.Millisecond, "%s: %s never in flight", identity, activity)
	return runID, activityID
}

// reannounce starts the identity of an already provisioned member again, in provisioning mode,
// with fresh keys: what anyone holding the provisioning credentials can do.
func (e *env) reannounce(m *devstack.FleetMember, index int) *devstack.FleetMember {
	e.t.Helper()
	m.Kill()
	require.NoError(e.t, os.RemoveAll(m.Dir))
	again, err := e.stack.Fleet.Start(index)
	require.NoError(e.t, err)
	return again
}

// The combined attack of issue #42: a host already provisioned is announced again by a process
// holding the provisioning credentials, with its own key; while its new run waits for the helper
// (which would refuse it now), a namespace client holding no codec key completes that helper
// task by ID with the helper output recorded in the identity's earlier run. The run refuses the
// result: it fails naming the refusal, nothing is signed for the announcer's key, no
// configuration is sent to it, the refusal is counted. Then the same with a plaintext failure of
// each type the workflow branches on, completed into the helper step of further re-announcements:
// none ends the run provisioned (a stale sighting) or anything but failed or retried.
func TestIntegrationCopiedResultRefused(t *testing.T) {
	t.Parallel() // most of it waits on the held step and the helper
	e := newEnv(t, envOptions{servers: 0, helper: switchableHelper(t)})
	e.refusals = true
	svc := e.provisioner("replica-a")
	first, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	e.waitProvisioned(90*time.Second, first)
	e.runs(first.Identity, 1)
	earlier := completedResults(e.history(first.Identity))
	require.NotNil(t, earlier[activities.RunHelperName], "the earlier run's helper output")

	plain, err := client.Dial(client.Options{HostPort: e.cfg.Temporal.Address, Namespace: e.cfg.Temporal.Namespace})
	require.NoError(t, err)
	defer plain.Close()
	ctx := context.Background()
	e.setFlag("helper-slow", true) // a helper asking a CMDB: the window the attacker uses

	announcer := e.reannounce(first, 0)
	runID, activityID := e.inFlight(announcer.Identity, activities.RunHelperName, 60*time.Second)
	_, err = plain.WorkflowService().RespondActivityTaskCompletedById(ctx, &workflowservice.RespondActivityTaskCompletedByIdRequest{
		Namespace: e.cfg.Temporal.Namespace, WorkflowId: workflows.WorkflowID(announcer.Identity), RunId: runID, ActivityId: activityID,
		Result: earlier[activities.RunHelperName], Identity: "attacker"})
	require.NoError(t, err, "the namespace lets any client complete a task by ID")
	err = e.client.GetWorkflow(ctx, workflows.WorkflowID(announcer.Identity), runID).Get(ctx, nil)
	require.Error(t, err, "the run fails")
	require.Contains(t, err.Error(), "result refused", "the failure names the refusal")
	t.Logf("COPIED helper output: %v", err)
	events := e.runHistory(workflows.WorkflowID(announcer.Identity), runID)
	require.NotContains(t, scheduled(events), activities.ConfigureName, "no configuration sent")
	require.NotContains(t, e.localActivities(events), activities.SignServerJWTName, "nothing signed for the announcer's key")
	require.False(t, devstack.Provisioned(announcer), "the announcer holds no configuration")
	require.Equal(t, 1.0, testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonForeignResult)))

	// a plaintext failure of every type the workflow branches on, into the helper step
	branches := []string{activities.ErrTypeNotProvisioning, activities.ErrTypeNoReply, activities.ErrTypeHelper, activities.ErrTypeHostNotProvisioning}
	for i, errType := range branches {
		announcer = e.reannounce(announcer, 0)
		runID, activityID = e.inFlight(announcer.Identity, activities.RunHelperName, 60*time.Second)
		_, err = plain.WorkflowService().RespondActivityTaskFailedById(ctx, &workflowservice.RespondActivityTaskFailedByIdRequest{
			Namespace: e.cfg.Temporal.Namespace, WorkflowId: workflows.WorkflowID(announcer.Identity), RunId: runID, ActivityId: activityID,
			Identity: "attacker", Failure: &failurepb.Failure{Message: "forged \x1b[31m" + errType, FailureInfo: &failurepb.Failure_ApplicationFailureInfo{
				ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: errType, NonRetryable: true}}}})
		require.NoError(t, err, errType)
		// the run does not take the failure's word: the helper step runs again (the workflow's
		// own retries), and this time the helper answers
		err = e.client.GetWorkflow(ctx, workflows.WorkflowID(announcer.Identity), runID).Get(ctx, nil)
		var res workflows.ProvisionResult
		if err == nil {
			require.NoError(t, e.client.GetWorkflow(ctx, workflows.WorkflowID(announcer.Identity), runID).Get(ctx, &res))
		}
		failures := e.activityFailures(e.runHistory(workflows.WorkflowID(announcer.Identity), runID))
		t.Logf("PLAINTEXT %s failure: run outcome %q, error %v, failures %q", errType, res.Outcome, err, failures)
		require.NotContains(t, res.Message, "stale sighting", errType)
		helperRuns := len(scheduledOf(e.runHistory(workflows.WorkflowID(announcer.Identity), runID), activities.RunHelperName))
		require.GreaterOrEqual(t, helperRuns, 2, "%s: the helper step ran again, the forged failure decided nothing", errType)
		require.Equal(t, float64(i+1), testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonUnsealedFailure)), errType)
		// history holds what the attacker wrote; what the run kept of it (status, hosts show) is cleaned
		d, err := e.operator().Show(ctx, announcer.Identity)
		require.NoError(t, err)
		untrusted := ""
		for _, rec := range d.State.Timeline {
			if strings.Contains(rec.Error, activities.ErrTypeUntrusted) {
				untrusted = rec.Error
			}
		}
		require.Contains(t, untrusted, "forged", "%s: the helper step's failure is the untrusted one: %+v", errType, d.State.Timeline)
		require.NotContains(t, untrusted, "\x1b", "%s: the failure's text is cleaned", errType)
	}
	require.Equal(t, 1.0, testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonForeignResult)))
}

// scheduledOf lists the scheduled events of one activity type.
func scheduledOf(events []*historypb.HistoryEvent, activity string) []*historypb.HistoryEvent {
	var out []*historypb.HistoryEvent
	for _, ev := range events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == activity {
			out = append(out, ev)
		}
	}
	return out
}

// A reset run behaves as docs/security.md says. Reset to a workflow task after the helper call
// was scheduled (a signal's task while the helper is in flight), the reset run replays the
// recorded policy and nonce; the helper task the copied history scheduled is handed out again
// with its input sealed by the original run, refused by the activity as another run's, sent
// again once, sealed by the reset run; sign refuses that answer's approval, which names the
// original run's reads, the run reads the host and asks the helper again, and the host is
// provisioned. Reset to the first workflow
// task, the run records its policy and nonce anew and runs every step again.
func TestIntegrationResetRunCompletes(t *testing.T) {
	e := newEnv(t, envOptions{servers: 0, helper: switchableHelper(t)})
	e.refusals = true
	svc := e.provisioner("replica-a")
	refused := func(reason string) float64 {
		return testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", reason))
	}
	ctx := context.Background()
	for i, point := range []string{"after the helper was scheduled", "the first workflow task"} {
		e.setFlag("helper-slow", true)
		m, err := e.stack.Fleet.Start(i)
		require.NoError(t, err)
		id := workflows.WorkflowID(m.Identity)
		runID, _ := e.inFlight(m.Identity, activities.RunHelperName, 60*time.Second)
		if i == 0 {
			// a workflow task of its own while the helper is in flight: a no-op resume
			require.NoError(t, e.client.SignalWorkflow(ctx, id, runID, workflows.ResumeSignal, nil))
		}
		var resetTo int64
		require.Eventually(t, func() bool {
			signalled := i == 1
			for _, ev := range e.runHistory(id, runID) {
				if ev.GetWorkflowExecutionSignaledEventAttributes() != nil {
					signalled = true
				}
				if ev.GetWorkflowTaskCompletedEventAttributes() != nil && signalled {
					resetTo = ev.GetEventId()
					return true
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond)
		before := refused(activities.ReasonForeignRequest)
		resp, err := e.client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
			Namespace: e.cfg.Temporal.Namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
			Reason: "test: reset to " + point, WorkflowTaskFinishEventId: resetTo, RequestId: "reset-" + runID})
		require.NoError(t, err, point)
		e.setFlag("helper-slow", false)
		var res workflows.ProvisionResult
		require.NoError(t, e.client.GetWorkflow(ctx, id, resp.GetRunId()).Get(ctx, &res), "%s: the reset run completes", point)
		require.Equal(t, workflows.OutcomeProvisioned, res.Outcome, point)
		e.waitProvisioned(60*time.Second, m)
		events := e.runHistory(id, resp.GetRunId())
		markers := 0
		for _, ev := range events {
			if ev.GetMarkerRecordedEventAttributes().GetMarkerName() == "SideEffect" {
				markers++
			}
		}
		require.Equal(t, 1, markers, "%s: one policy and nonce: the original's replayed, or recorded anew", point)
		t.Logf("RESET to %s: requests refused as the original run's and sent again: %v; activity failures %q", point,
			refused(activities.ReasonForeignRequest)-before, e.activityFailures(events))
		if i == 0 {
			require.Equal(t, before+1, refused(activities.ReasonForeignRequest), "%s: the helper task of the original run, refused once", point)
			// the original's helper request, this run's, and a third: the approval the helper gave
			// named reads the original run received, so sign refused it and the run read the host
			// and asked the helper again before signing (docs/security.md, reset)
			require.Len(t, scheduledOf(events, activities.RunHelperName), 3, "%s: the original's helper request, this run's, and the one asked again", point)
			require.Equal(t, 1.0, refused(activities.ReasonStaleApproval), "%s: the approval of the original run's reads refused once", point)
		}
	}
	require.Zero(t, refused(activities.ReasonForeignResult), "no result refused")
	require.Zero(t, refused(activities.ReasonUnsealedFailure), "no failure untrusted")
}

// A reset after a configuration change behaves as docs/security.md says: the run was recorded
// under one configuration (replica A), A is replaced by a replica whose configuration differs
// (B: another defer delay), and the run is reset to a workflow task after its helper call was
// scheduled. B runs the reset run with the policy the run recorded under A (the side effect is
// replayed, not taken again), logs the difference once per run and counts it
// (choria_provisioner_policy_drift_total), and the host is provisioned.
func TestIntegrationResetAfterConfigChange(t *testing.T) {
	e := newEnv(t, envOptions{servers: 0, helper: switchableHelper(t)})
	e.refusals = true // the original's helper task is refused as another run's (TestIntegrationResetRunCompletes)
	_, stopA := e.replicaWith("replica-a", e.cfg, service.Options{Worker: true, Discovery: true})
	e.setFlag("helper-slow", true)
	m, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	id := workflows.WorkflowID(m.Identity)
	ctx := context.Background()
	runID, _ := e.inFlight(m.Identity, activities.RunHelperName, 60*time.Second)
	require.NoError(t, e.client.SignalWorkflow(ctx, id, runID, workflows.ResumeSignal, nil))
	var resetTo int64
	require.Eventually(t, func() bool {
		signalled := false
		for _, ev := range e.runHistory(id, runID) {
			signalled = signalled || ev.GetWorkflowExecutionSignaledEventAttributes() != nil
			if ev.GetWorkflowTaskCompletedEventAttributes() != nil && signalled {
				resetTo = ev.GetEventId()
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond)
	stopA()

	changed := *e.cfg
	changed.DeferDelay, changed.DeferDelayDuration = "7s", 7*time.Second
	require.NotEqual(t, service.Policy(e.cfg).Digest(), service.Policy(&changed).Digest())
	b, _ := e.replicaWith("replica-b", &changed, service.Options{Worker: true})
	e.setFlag("helper-slow", false)
	resp, err := e.client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: e.cfg.Temporal.Namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
		Reason: "test: reset after a configuration change", WorkflowTaskFinishEventId: resetTo, RequestId: "reset-" + runID})
	require.NoError(t, err)
	var res workflows.ProvisionResult
	require.NoError(t, e.client.GetWorkflow(ctx, id, resp.GetRunId()).Get(ctx, &res), "the reset run completes")
	require.Equal(t, workflows.OutcomeProvisioned, res.Outcome)
	e.waitProvisioned(60*time.Second, m)
	// once per run B worked on: the reset run, and the original too when B took a task of it
	// before the reset (A's helper call ended when A stopped)
	drift := testutil.ToFloat64(b.Metrics.PolicyDrift.WithLabelValues("dev"))
	require.GreaterOrEqual(t, drift, 1.0, "the difference counted")
	require.LessOrEqual(t, drift, 2.0, "once per run, not per request")
	require.Equal(t, int(drift), e.logLines("replica-b", `"recorded_digest":"`+service.Policy(e.cfg).Digest()+`"`,
		`"worker_digest":"`+service.Policy(&changed).Digest()+`"`), "and logged as often, with both digests")
	markers := 0
	for _, ev := range e.runHistory(id, resp.GetRunId()) {
		if ev.GetMarkerRecordedEventAttributes().GetMarkerName() == "SideEffect" {
			markers++
		}
	}
	require.Equal(t, 1, markers, "the policy recorded under A, replayed: not taken again from B")
}
