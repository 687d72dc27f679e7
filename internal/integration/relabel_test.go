package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/proto"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/workflows"
)

// relabelled is a failure the worker sealed, as DescribeWorkflowExecution or history show it to
// any namespace reader, with its plain type, retry flag and message changed: its sealed details
// and encrypted attributes kept as they are.
func relabelled(f *failurepb.Failure, as string) *failurepb.Failure {
	out := proto.Clone(f).(*failurepb.Failure)
	out.Message = "relabelled " + as
	info := out.GetApplicationFailureInfo()
	info.Type, info.NonRetryable = as, true
	return out
}

// failAs fails the activity in flight by ID with the worker's own sealed failure relabelled.
func (e *env) failAs(identity, runID, activityID string, sealed *failurepb.Failure, as string) {
	e.t.Helper()
	_, err := e.plainClient().WorkflowService().RespondActivityTaskFailedById(context.Background(), &workflowservice.RespondActivityTaskFailedByIdRequest{
		Namespace: e.cfg.Temporal.Namespace, WorkflowId: workflows.WorkflowID(identity), RunId: runID, ActivityId: activityID,
		Identity: "attacker", Failure: relabelled(sealed, as)})
	require.NoError(e.t, err, as)
}

// retriedWithFailure waits until activity of the host's open run is on a later attempt with the
// earlier attempt's failure, sealed by the worker, shown beside it (the pending activity's
// last failure: what DescribeWorkflowExecution gives any namespace reader).
func (e *env) retriedWithFailure(identity, activity string) (runID, activityID string, last *failurepb.Failure) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		resp, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(identity), "")
		if err != nil {
			return false
		}
		for _, pa := range resp.GetPendingActivities() {
			// started: in its retry's backoff an attempt cannot be failed by ID
			if pa.GetActivityType().GetName() == activity && pa.GetLastFailure().GetApplicationFailureInfo() != nil &&
				pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
				runID, activityID, last = resp.GetWorkflowExecutionInfo().GetExecution().GetRunId(), pa.GetActivityId(), pa.GetLastFailure()
				return true
			}
		}
		return false
	}, 90*time.Second, 20*time.Millisecond, "%s: %s never retried", identity, activity)
	return runID, activityID, last
}

// The probe of issue #51: a namespace client holding no codec key takes a read's first failure,
// sealed by the worker (no reply; shown with the retry in flight), and fails the read's next attempt by ID
// with it as NotInProvisioningMode, non-retryable. Before the verdict was sealed, 2 of 2 such runs
// ended "provisioned" with the host untouched. Now the run refuses the failure (its plain fields
// differ from the sealed verdict), counts it, and never ends provisioned without a configure; the
// host stays in provisioning mode. The helper's step, whose earlier attempt's failure is in
// history, refuses it too (another request's), and the run ends as the real helper answers.
func TestIntegrationRelabelledSealedFailuresDecideNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 0, helper: switchableHelper(t), faults: true})
	e.refusals = true
	svc := e.provisioner("replica-a")
	altered := func() float64 {
		return testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonAlteredFailure))
	}
	ctx := context.Background()
	// a host provisioned first: the provisioner's connections to the broker are up before any
	// request is held (a held handshake would fail the reads as unsent, not unanswered)
	warm := e.startFleetSimAs("warm", 1, "--prefix", "relabel-warm-")
	require.Eventually(t, func() bool {
		for _, h := range warm().Hosts {
			return h.Restarted
		}
		return false
	}, 90*time.Second, 100*time.Millisecond, "the first host is provisioned")
	// each host's requests are held from its start: a read's first attempt fails as the worker
	// seals it (no reply), and its retry waits in flight, the attacker's window
	for i, step := range []string{activities.InventoryName, activities.FetchJWTName} {
		release := e.holdRequests()
		sim := e.startFleetSimAs(fmt.Sprintf("relabel-%d", i), 1, "--prefix", fmt.Sprintf("relabel-%d-", i))
		var identity string
		require.Eventually(t, func() bool {
			for id := range sim().Hosts {
				identity = id
			}
			return identity != ""
		}, 60*time.Second, 100*time.Millisecond)
		runID, activityID, sealed := e.retriedWithFailure(identity, step)
		e.failAs(identity, runID, activityID, sealed, activities.ErrTypeNotProvisioning)
		release()
		var res workflows.ProvisionResult
		err := e.client.GetWorkflow(ctx, workflows.WorkflowID(identity), runID).Get(ctx, &res)
		events := e.runHistory(workflows.WorkflowID(identity), runID)
		t.Logf("RELABELLED %s failure as NotInProvisioningMode: outcome %q, error %v, failures %q", step, res.Outcome, err, e.activityFailures(events))
		require.Error(t, err, "%s: the run does not end provisioned on it", step)
		// it fails on its first read's real failure (the reads are held), never on the relabel
		require.NotContains(t, err.Error(), activities.ErrTypeNotProvisioning, step)
		require.NotContains(t, scheduled(events), activities.ConfigureName, step)
		require.Equal(t, float64(i+1), altered(), "%s: counted", step)
		require.False(t, sim().Hosts[identity].Configured, "%s: the host is untouched", step)
	}

	// the helper: its first attempt fails (the CA is down), the next is held in flight (slow)
	// and failed by ID with the first's sealed failure, from history, relabelled
	e.setFlag("helper-broken", true)
	more := e.startFleetSimAs("helper", 1, "--prefix", "relabel-helper-")
	var identity string
	require.Eventually(t, func() bool {
		for id := range more().Hosts {
			identity = id
		}
		return identity != ""
	}, 60*time.Second, 100*time.Millisecond)
	var sealed *failurepb.Failure
	var runID string
	require.Eventually(t, func() bool {
		resp, err := e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(identity), "")
		if err != nil {
			return false
		}
		runID = resp.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		for _, ev := range e.runHistory(workflows.WorkflowID(identity), runID) {
			if f := ev.GetActivityTaskFailedEventAttributes().GetFailure(); f != nil {
				sealed = f
				return true
			}
		}
		return false
	}, 60*time.Second, 50*time.Millisecond)
	e.setFlag("helper-slow", true)
	e.setFlag("helper-broken", false)
	_, activityID := e.inFlight(identity, activities.RunHelperName, 60*time.Second)
	e.failAs(identity, runID, activityID, sealed, activities.ErrTypeConfig)
	e.setFlag("helper-slow", false)
	// the workflow retries the helper itself: the relabelled failure is one more untrusted try,
	// not the ConfigError it claims, and the run ends as the real helper answers
	var res workflows.ProvisionResult
	require.NoError(t, e.client.GetWorkflow(ctx, workflows.WorkflowID(identity), runID).Get(ctx, &res))
	events := e.runHistory(workflows.WorkflowID(identity), runID)
	t.Logf("RELABELLED helper failure as ConfigError: outcome %q, failures %q", res.Outcome, e.activityFailures(events))
	require.Equal(t, workflows.OutcomeProvisioned, res.Outcome)
	require.GreaterOrEqual(t, len(scheduledOf(events, activities.RunHelperName)), 3, "asked again after the refused failure")
	require.Contains(t, scheduled(events), activities.ConfigureName, "provisioned because it was configured")
	// the workflow runs each helper attempt as an activity of its own, with a request of its own:
	// the earlier attempt's sealed failure answers another request, so it is refused as unsealed
	// for this one before its plain fields are even compared
	require.Equal(t, 2.0, altered())
	require.Equal(t, 1.0, testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonUnsealedFailure)))
}
