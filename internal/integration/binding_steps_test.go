package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	deploymentpb "go.temporal.io/api/deployment/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/faultproxy"
	"github.com/choria-temporal/provisioner/internal/dev/fleetsim"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// holdRequests holds every request the provisioner sends to the broker (replies and the hosts'
// lifecycle events still arrive) until the returned release, which drops what was held (the
// proxy's connections close, the client reconnects) rather than delivering it.
func (e *env) holdRequests() (release func()) {
	e.t.Helper()
	heal, err := e.stack.BrokerProxy.Cut(faultproxy.Upstream)
	require.NoError(e.t, err)
	return func() {
		up := e.stack.BrokerProxy.Down()
		require.NoError(e.t, heal())
		require.NoError(e.t, up())
	}
}

// The combined attack of issue #42 for the steps after and before the helper's: a host already
// provisioned is announced again with fresh keys, and while its new run's inventory read, JWT
// read or configure call is held in flight (its request held on the way to the broker), a
// namespace client holding no codec key completes that task by ID with the result recorded for
// the same step in the host's earlier run. The run refuses each: it fails naming the refusal,
// the refusal is counted, nothing signed for the announcer's key leaves (configure is never
// scheduled after a refused read, and a refused configure's request never reaches the server),
// and the announcer stays in provisioning mode. Signing is not among them: SignServerJWT runs
// as a local activity in the run's own worker, so no task of it is ever on the queue to answer
// (no run's history schedules one).
func TestIntegrationCopiedStepResultsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 0, helper: switchableHelper(t), faults: true})
	e.refusals = true
	svc := e.provisioner("replica-a")
	first, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	e.waitProvisioned(90*time.Second, first)
	e.runs(first.Identity, 1)
	events := e.history(first.Identity)
	earlier := completedResults(events)
	require.NotContains(t, scheduled(events), activities.SignServerJWTName, "signing is never a task on the queue")
	require.Contains(t, e.localActivities(events), activities.SignServerJWTName)

	plain, err := client.Dial(client.Options{HostPort: e.cfg.Temporal.Address, Namespace: e.cfg.Temporal.Namespace})
	require.NoError(t, err)
	defer plain.Close()
	ctx := context.Background()
	announcer := first
	for i, step := range []string{activities.InventoryName, activities.FetchJWTName, activities.ConfigureName} {
		require.NotNil(t, earlier[step], "%s: the earlier run's result", step)
		var release func()
		if step == activities.ConfigureName {
			// the reads pass; the requests are held from the helper call on, so configure's is
			e.setFlag("helper-broken", false)
			e.setFlag("helper-slow", true)
			announcer = e.reannounce(announcer, 0)
			e.inFlight(announcer.Identity, activities.RunHelperName, 60*time.Second)
			release = e.holdRequests()
		} else {
			e.setFlag("helper-broken", true) // a later run of the announcer goes no further than the helper
			release = e.holdRequests()
			announcer = e.reannounce(announcer, 0)
		}
		runID, activityID := e.inFlight(announcer.Identity, step, 60*time.Second)
		if step == activities.ConfigureName {
			e.setFlag("helper-broken", true)
		}
		_, err = plain.WorkflowService().RespondActivityTaskCompletedById(ctx, &workflowservice.RespondActivityTaskCompletedByIdRequest{
			Namespace: e.cfg.Temporal.Namespace, WorkflowId: workflows.WorkflowID(announcer.Identity), RunId: runID, ActivityId: activityID,
			Result: earlier[step], Identity: "attacker"})
		require.NoError(t, err, step)
		// what was held is dropped: the other read of the run is sent again and answered
		release()
		err = e.client.GetWorkflow(ctx, workflows.WorkflowID(announcer.Identity), runID).Get(ctx, nil)
		require.Error(t, err, "%s: the run fails", step)
		require.Contains(t, err.Error(), "result refused", "%s: the failure names the refusal", step)
		t.Logf("COPIED %s result: %v", step, err)
		events := e.runHistory(workflows.WorkflowID(announcer.Identity), runID)
		require.NotContains(t, scheduled(events), activities.SignServerJWTName, step)
		if step != activities.ConfigureName {
			require.NotContains(t, scheduled(events), activities.ConfigureName, "%s: no configuration sent", step)
			require.NotContains(t, e.localActivities(events), activities.SignServerJWTName, "%s: nothing signed for the announcer's key", step)
		}
		require.Never(t, func() bool { return devstack.Provisioned(announcer) }, 5*time.Second, 250*time.Millisecond,
			"%s: the announcer holds no configuration", step)
		require.Equal(t, float64(i+1), testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonForeignResult)), step)
	}
	require.Zero(t, testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonUnsealedFailure)))

	// a plaintext failure of each type the reads branch on (the host left provisioning mode, it
	// does not answer), completed by ID into a read held in flight: the run never ends on it as
	// a stale sighting; it fails, or reads again and ends as the real server answers
	e.setFlag("helper-broken", false)
	e.setFlag("helper-slow", false)
	for i, c := range []struct{ step, errType string }{
		{activities.InventoryName, activities.ErrTypeNotProvisioning},
		{activities.InventoryName, activities.ErrTypeHostNotProvisioning},
		{activities.InventoryName, activities.ErrTypeNoReply},
		{activities.FetchJWTName, activities.ErrTypeHostNotProvisioning},
		{activities.FetchJWTName, activities.ErrTypeNoReply},
	} {
		release := e.holdRequests()
		announcer = e.reannounce(announcer, 0)
		runID, activityID := e.inFlight(announcer.Identity, c.step, 60*time.Second)
		e.forgeFailure(plain, announcer.Identity, runID, activityID, c.errType)
		release()
		var res workflows.ProvisionResult
		err := e.client.GetWorkflow(ctx, workflows.WorkflowID(announcer.Identity), runID).Get(ctx, &res)
		events := e.runHistory(workflows.WorkflowID(announcer.Identity), runID)
		t.Logf("PLAINTEXT %s into %s: outcome %q, message %q, error %v, failures %q", c.errType, c.step, res.Outcome, res.Message, err, e.activityFailures(events))
		require.Equal(t, float64(i+1), testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonUnsealedFailure)), c.errType)
		require.NotContains(t, res.Message, "stale sighting", "%s into %s", c.errType, c.step)
		if err == nil {
			require.Equal(t, workflows.OutcomeProvisioned, res.Outcome, "%s into %s", c.errType, c.step)
			require.GreaterOrEqual(t, len(scheduledOf(events, c.step)), 2, "%s into %s: read again", c.errType, c.step)
			require.Contains(t, scheduled(events), activities.ConfigureName, "%s into %s: provisioned because it was configured", c.errType, c.step)
			e.waitProvisioned(60*time.Second, announcer)
		}
	}
}

// forgeFailure fails the activity by ID with a plaintext failure of errType, as a namespace
// client holding no codec key can.
func (e *env) forgeFailure(c client.Client, identity, runID, activityID, errType string) {
	e.t.Helper()
	_, err := c.WorkflowService().RespondActivityTaskFailedById(context.Background(), &workflowservice.RespondActivityTaskFailedByIdRequest{
		Namespace: e.cfg.Temporal.Namespace, WorkflowId: workflows.WorkflowID(identity), RunId: runID, ActivityId: activityID,
		Identity: "attacker", Failure: &failurepb.Failure{Message: "forged " + errType, FailureInfo: &failurepb.Failure_ApplicationFailureInfo{
			ApplicationFailureInfo: &failurepb.ApplicationFailureInfo{Type: errType, NonRetryable: true}}}})
	require.NoError(e.t, err, errType)
}

// A plaintext NoReply completed by ID into a live run's restart and shutdown calls decides
// nothing: the run does not count the restart or the shutdown as done on it (a NoReply after
// configure or after a shutdown request is otherwise taken as the server gone). Today the run
// fails on the untrusted failure (measured: both runs, every time); a run that sent the call
// again instead would have to end as the real server answered it. The simulated hosts hold each restart
// and shutdown reply a few seconds, the window the attacker uses.
func TestIntegrationUnsealedFailuresInRestartAndShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 0, helper: func(s *devstack.Stack) string {
		script := filepath.Join(s.Opts.Dir, "helper.sh")
		body := "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in *'\"identity\":\"'*doomed-*) echo '{\"shutdown\":true,\"msg\":\"decommissioned\"}'; exit 0;; esac\nprintf '%s' \"$input\" | " + s.HelperCommand + "\n"
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	e.refusals = true
	delays := []string{"--reply-delay", "restart=6s", "--reply-delay", "shutdown=6s"}
	kept := e.startFleetSimAs("kept", 1, append([]string{"--prefix", "kept-"}, delays...)...)
	doomed := e.startFleetSimAs("doomed", 1, append([]string{"--prefix", "doomed-"}, delays...)...)
	svc := e.provisioner("replica-a")
	plain := e.plainClient()
	ctx := context.Background()
	for i, c := range []struct {
		status  func() fleetsim.Status
		step    string
		outcome string
	}{
		{kept, activities.RestartName, workflows.OutcomeProvisioned},
		{doomed, activities.ShutdownName, workflows.OutcomeShutdown},
	} {
		var identity string
		require.Eventually(t, func() bool {
			for id := range c.status().Hosts {
				identity = id
			}
			return identity != ""
		}, 60*time.Second, 100*time.Millisecond)
		runID, activityID := e.inFlight(identity, c.step, 90*time.Second)
		e.forgeFailure(plain, identity, runID, activityID, activities.ErrTypeNoReply)
		var res workflows.ProvisionResult
		err := e.client.GetWorkflow(ctx, workflows.WorkflowID(identity), runID).Get(ctx, &res)
		events := e.runHistory(workflows.WorkflowID(identity), runID)
		calls := len(scheduledOf(events, c.step))
		t.Logf("PLAINTEXT NoReply into %s: outcome %q, message %q, error %v, %s calls %d, failures %q",
			c.step, res.Outcome, res.Message, err, c.step, calls, e.activityFailures(events))
		require.Equal(t, float64(i+1), testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonUnsealedFailure)), c.step)
		if err != nil {
			// the run fails on the untrusted failure: not restarted, not shut down
			require.Contains(t, err.Error(), activities.ErrTypeUntrusted, c.step)
		} else {
			// or it sent the call again and ended as the real server answered it
			require.GreaterOrEqual(t, calls, 2, "%s: the call was sent again, the forged NoReply decided nothing", c.step)
			require.Equal(t, c.outcome, res.Outcome, c.step)
			require.True(t, c.status().Hosts[identity].Restarted, "%s: the run ended so because the server did", c.step)
		}
	}
}

// The combined attack in pki mode, where the helper makes the server's private key: the helper
// output recorded in the identity's earlier run (the key, sealed for that run) completed by ID
// into the re-announced host's helper call is refused, configure is never scheduled, and no
// private key reaches the announcer.
func TestIntegrationPKICopiedHelperKeyRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mode: devstack.ModePKI, servers: 0, helper: func(s *devstack.Stack) string {
		script := filepath.Join(s.Opts.Dir, "helper.sh")
		body := fmt.Sprintf("#!/bin/sh\ninput=$(cat)\nif [ -f %[1]s/helper-slow ]; then sleep 8; fi\nprintf '%%s' \"$input\" | %[2]s --supply-key\n", s.Opts.Dir, s.HelperCommand)
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	e.refusals = true
	svc := e.provisioner("replica-a")
	first, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	e.waitProvisioned(90*time.Second, first)
	log, err := os.ReadFile(first.LogFile)
	require.NoError(t, err)
	require.Contains(t, string(log), "Received a PRIVATE KEY", "the earlier run sent the helper's key")
	earlier := completedResults(e.history(first.Identity))
	require.NotNil(t, earlier[activities.RunHelperName])

	plain := e.plainClient()
	ctx := context.Background()
	e.setFlag("helper-slow", true)
	announcer := e.reannounce(first, 0)
	runID, activityID := e.inFlight(announcer.Identity, activities.RunHelperName, 60*time.Second)
	_, err = plain.WorkflowService().RespondActivityTaskCompletedById(ctx, &workflowservice.RespondActivityTaskCompletedByIdRequest{
		Namespace: e.cfg.Temporal.Namespace, WorkflowId: workflows.WorkflowID(announcer.Identity), RunId: runID, ActivityId: activityID,
		Result: earlier[activities.RunHelperName], Identity: "attacker"})
	require.NoError(t, err)
	err = e.client.GetWorkflow(ctx, workflows.WorkflowID(announcer.Identity), runID).Get(ctx, nil)
	require.Error(t, err, "the run fails")
	require.Contains(t, err.Error(), "result refused")
	t.Logf("COPIED pki helper output: %v", err)
	events := e.runHistory(workflows.WorkflowID(announcer.Identity), runID)
	require.NotContains(t, scheduled(events), activities.ConfigureName, "no key or configuration sent")
	require.Never(t, func() bool { return devstack.Provisioned(announcer) }, 3*time.Second, 250*time.Millisecond)
	log, err = os.ReadFile(announcer.LogFile)
	require.NoError(t, err)
	require.NotContains(t, string(log), "Received a PRIVATE KEY", "no private key reached the announcer")
	require.Equal(t, 1.0, testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonForeignResult)))
}

// The combined attack, poll-and-answer: the attacker does not complete the helper task by ID but
// takes it off the queue itself, as any namespace client may poll, and answers it by its task
// token with the helper output of the identity's earlier run. For the attacker's poll to be
// handed the task at all it must present the provisioner's Worker Deployment version (with
// worker_versioning, a versioned run's tasks go only to pollers of its build; an unversioned
// poll waits forever), and no poller of the provisioner's may be waiting: here the helper runs on
// its own queue (helper_rate_limit) and both of the one worker's helper slots are held by two
// other hosts' helper calls, so the provisioner does not poll that queue. The run refuses the
// result as it does one completed by ID.
func TestIntegrationPolledHelperTaskRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 0, extraConfig: "workers: 1\nhelper_rate_limit: 50\n", helper: func(s *devstack.Stack) string {
		script := filepath.Join(s.Opts.Dir, "helper.sh")
		body := fmt.Sprintf("#!/bin/sh\ninput=$(cat)\ncase \"$input\" in *'\"identity\":\"'*node-00[12]*) while [ -f %[1]s/held ]; do sleep 0.2; done;; esac\nprintf '%%s' \"$input\" | %[2]s\n", s.Opts.Dir, s.HelperCommand)
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	e.refusals = true
	require.Equal(t, 2, service.HelperTaskSlots(1))
	svc := e.provisioner("replica-a")
	first, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	e.waitProvisioned(90*time.Second, first)
	earlier := completedResults(e.history(first.Identity))
	require.NotNil(t, earlier[activities.RunHelperName])

	e.setFlag("held", true)
	for i := 1; i <= 2; i++ { // the provisioner's two helper slots, held
		m, err := e.stack.Fleet.Start(i)
		require.NoError(t, err)
		e.inFlight(m.Identity, activities.RunHelperName, 60*time.Second)
	}
	announcer := e.reannounce(first, 0)
	plain := e.plainClient()
	queue := &taskqueuepb.TaskQueue{Name: workflows.HelperTaskQueue(e.cfg.Temporal.TaskQueue), Kind: enumspb.TASK_QUEUE_KIND_NORMAL}
	e.inFlight(announcer.Identity, activities.RunHelperName, 60*time.Second)
	// why an earlier attempt's attacker never received the task: an unversioned poll is not
	// handed a versioned run's task
	unversioned, cancelUnversioned := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelUnversioned()
	none, err := plain.WorkflowService().PollActivityTaskQueue(unversioned, &workflowservice.PollActivityTaskQueueRequest{
		Namespace: e.cfg.Temporal.Namespace, Identity: "attacker", TaskQueue: queue})
	require.Empty(t, none.GetTaskToken(), "an unversioned poll gets no task (%v)", err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	task, err := plain.WorkflowService().PollActivityTaskQueue(ctx, &workflowservice.PollActivityTaskQueueRequest{
		Namespace: e.cfg.Temporal.Namespace, Identity: "attacker", TaskQueue: queue,
		DeploymentOptions: &deploymentpb.WorkerDeploymentOptions{DeploymentName: service.DeploymentName(e.cfg.Temporal.TaskQueue),
			BuildId: "development", WorkerVersioningMode: enumspb.WORKER_VERSIONING_MODE_VERSIONED}})
	require.NoError(t, err)
	require.NotEmpty(t, task.GetTaskToken(), "the attacker's poll is handed a task")
	require.Equal(t, workflows.WorkflowID(announcer.Identity), task.GetWorkflowExecution().GetWorkflowId(), "the announcer's helper task")
	require.Equal(t, activities.RunHelperName, task.GetActivityType().GetName())
	_, err = plain.WorkflowService().RespondActivityTaskCompleted(ctx, &workflowservice.RespondActivityTaskCompletedRequest{
		Namespace: e.cfg.Temporal.Namespace, TaskToken: task.GetTaskToken(), Result: earlier[activities.RunHelperName], Identity: "attacker"})
	require.NoError(t, err)
	runID := task.GetWorkflowExecution().GetRunId()
	err = e.client.GetWorkflow(ctx, workflows.WorkflowID(announcer.Identity), runID).Get(ctx, nil)
	e.setFlag("held", false)
	require.Error(t, err, "the run fails")
	require.Contains(t, err.Error(), "result refused")
	t.Logf("POLLED helper task answered with the earlier output: %v", err)
	events := e.runHistory(workflows.WorkflowID(announcer.Identity), runID)
	require.NotContains(t, scheduled(events), activities.ConfigureName, "no configuration sent")
	require.NotContains(t, e.localActivities(events), activities.SignServerJWTName, "nothing signed for the announcer's key")
	require.False(t, devstack.Provisioned(announcer))
	require.Equal(t, 1.0, testutil.ToFloat64(svc.Metrics.RefusedPayloads.WithLabelValues("dev", activities.ReasonForeignResult)))
}
