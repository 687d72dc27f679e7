package integration

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/control"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// plainClient is a namespace client without the codec key.
func (e *env) plainClient() client.Client {
	e.t.Helper()
	c, err := client.Dial(client.Options{HostPort: e.cfg.Temporal.Address, Namespace: e.cfg.Temporal.Namespace})
	require.NoError(e.t, err)
	e.t.Cleanup(c.Close)
	return c
}

// rawSignal sends a signal with exactly input (nil: no payload at all), as any namespace client can.
func (e *env) rawSignal(c client.Client, workflowID, name string, input *commonpb.Payloads) {
	e.t.Helper()
	_, err := c.WorkflowService().SignalWorkflowExecution(context.Background(), &workflowservice.SignalWorkflowExecutionRequest{
		Namespace: e.cfg.Temporal.Namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: workflowID},
		SignalName: name, Input: input, Identity: "intruder"})
	require.NoError(e.t, err)
}

// signalPayload is the input of the first signal named name in a workflow's history.
func (e *env) signalPayload(workflowID, name string) *commonpb.Payloads {
	e.t.Helper()
	for _, ev := range e.historyOf(workflowID) {
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == name {
			return a.GetInput()
		}
	}
	e.t.Fatalf("%s has no %s signal", workflowID, name)
	return nil
}

func (e *env) refusedSignals(svc *service.Service, reason string) float64 {
	return testutil.ToFloat64(svc.Metrics.RefusedSignals.WithLabelValues(e.cfg.Site, reason))
}

// Forged pause and resume signals, to the control workflow and to a held host, change nothing: a
// plaintext request, one sealed with another key, an empty signal, and the operator's own sealed
// pause sent again as a resume, or to the other action later. Each is refused and counted by
// reason; the fleet stays paused (discovery starts no host, the held host holds), and after the
// operator's resume a forged pause holds nothing either.
func TestIntegrationForgedControlSignalsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 1, helper: switchableHelper(t)})
	svc := e.provisioner("replica-a")
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members...)
	op := e.operator()
	ctx := context.Background()
	queue := e.cfg.Temporal.TaskQueue
	controlID := workflows.ControlWorkflowID(queue)

	// a host held in its helper step by the operator's pause
	e.setFlag("helper-slow", true)
	held, err := e.stack.Fleet.Start(1)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := op.Show(ctx, held.Identity)
		return err == nil && d.Step == workflows.StepHelper
	}, 60*time.Second, 100*time.Millisecond)
	n, err := op.SetPaused(ctx, true, "test", "maintenance")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	hostID := workflows.WorkflowID(held.Identity)
	sealedPause := e.signalPayload(controlID, workflows.PauseSignal)
	sealedHostPause := e.signalPayload(hostID, workflows.PauseSignal)

	// the forgeries: what a namespace client without the key can send
	plain := e.plainClient()
	resume := workflows.ControlRequest{Action: workflows.ResumeSignal, TaskQueue: queue, By: "intruder", At: time.Now().UTC()}
	plainResume, err := converter.GetDefaultDataConverter().ToPayloads(resume)
	require.NoError(t, err)
	other, err := codec.New(codec.NewKey())
	require.NoError(t, err)
	foreignResume, err := converter.WithDataConverterSerializationContext(codec.DataConverter(other),
		converter.WorkflowSerializationContext{Namespace: e.cfg.Temporal.Namespace, WorkflowID: controlID}).ToPayloads(resume)
	require.NoError(t, err)
	for _, id := range []string{controlID, hostID} {
		e.rawSignal(plain, id, workflows.ResumeSignal, plainResume)
		e.rawSignal(plain, id, workflows.ResumeSignal, foreignResume)
		e.rawSignal(plain, id, workflows.ResumeSignal, nil)
		e.rawSignal(plain, id, workflows.ResumeSignal, sealedPause) // the operator's pause, as a resume
		e.rawSignal(plain, id, workflows.ControlRequestChannel, sealedPause)
	}
	e.rawSignal(plain, hostID, workflows.ResumeSignal, sealedHostPause)
	require.Eventually(t, func() bool {
		return e.refusedSignals(svc, workflows.SignalUnsealed) == 4 && e.refusedSignals(svc, workflows.SignalEmpty) == 2 &&
			e.refusedSignals(svc, workflows.SignalMisdirected) == 5
	}, 30*time.Second, 100*time.Millisecond, "unsealed %v, empty %v, misdirected %v", e.refusedSignals(svc, workflows.SignalUnsealed),
		e.refusedSignals(svc, workflows.SignalEmpty), e.refusedSignals(svc, workflows.SignalMisdirected))

	// nothing changed: paused, the held host holds, a new host is not started
	st, err := op.Control().State(ctx)
	require.NoError(t, err)
	require.True(t, st.Paused)
	require.Equal(t, "maintenance", st.Reason)
	d, err := op.Show(ctx, held.Identity)
	require.NoError(t, err)
	require.True(t, d.State.Paused)
	require.Equal(t, workflows.StepHelper, d.State.Step)
	e.setFlag("helper-slow", false)
	fresh := e.startedNotRun(ctx, svc, 2, "paused")
	require.False(t, devstack.Provisioned(held))

	// the operator's resume goes on; a forged pause afterwards holds nobody
	_, err = op.SetPaused(ctx, false, "test", "")
	require.NoError(t, err)
	pause := workflows.ControlRequest{Action: workflows.PauseSignal, TaskQueue: queue, By: "intruder", At: time.Now().UTC()}
	plainPause, err := converter.GetDefaultDataConverter().ToPayloads(pause)
	require.NoError(t, err)
	e.rawSignal(plain, controlID, workflows.PauseSignal, plainPause)
	e.rawSignal(plain, controlID, workflows.PauseSignal, nil)
	e.rawSignal(plain, controlID, workflows.PauseSignal, sealedPause) // the old pause again, after the resume
	require.Eventually(t, func() bool { return e.refusedSignals(svc, workflows.SignalStale) == 1 }, 30*time.Second, 100*time.Millisecond)
	st, err = op.Control().State(ctx)
	require.NoError(t, err)
	require.False(t, st.Paused)
	e.sweepWhenRunning(ctx, svc)
	e.waitProvisioned(60*time.Second, held, fresh)
	e.runs(held.Identity, 1)
	e.runs(fresh.Identity, 1)
	require.Zero(t, testutil.ToFloat64(svc.Metrics.ControlUnreadable.WithLabelValues(e.cfg.Site)))
}

// squatter holds the control workflow's ID on a queue of its own and answers the state query
// with "not paused", in plaintext, for as long as it runs.
func squatter(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, workflows.ControlStateQuery, func() (workflows.ControlState, error) {
		return workflows.ControlState{}, nil
	}); err != nil {
		return err
	}
	workflow.GetSignalChannel(ctx, "never").Receive(ctx, nil)
	return nil
}

// A workflow of another type (and task queue) that a namespace client started under the ID
// provisioner-control:<queue> does not answer for the control workflow: discovery takes the fleet
// as paused and starts no host (control_unreadable 1, which ProvisionerControlUnreadable alerts
// on), hosts paused names the squatter, and the operator's pause or resume refuses to signal it.
// Once it is terminated, the operator's resume starts the provisioner's control workflow again and
// hosts are provisioned. The provisioner's own control workflow, terminated by someone, holds the
// fleet the same way until hosts resume starts it again.
func TestIntegrationSquattedControlWorkflowHoldsTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 1})
	svc := e.provisioner("replica-a")
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members...)
	op := e.operator()
	ctx := context.Background()
	controlID := workflows.ControlWorkflowID(e.cfg.Temporal.TaskQueue)

	plain := e.plainClient()
	const squatterQueue = "squatter"
	w := worker.New(plain, squatterQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(squatter, workflow.RegisterOptions{Name: "Squatter"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	run, err := plain.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: controlID, TaskQueue: squatterQueue}, "Squatter")
	require.NoError(t, err)

	// discovery: the fleet is paused while the squatter holds the ID
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(svc.Metrics.ControlUnreadable.WithLabelValues(e.cfg.Site)) == 1 &&
			testutil.ToFloat64(svc.Metrics.Paused.WithLabelValues(e.cfg.Site)) == 1
	}, 30*time.Second, 200*time.Millisecond, "control_unreadable and paused")
	fresh := e.startedNotRun(ctx, svc, 1, "the control workflow was squatted")

	// the operator: told, and the squatter is not signaled
	out, code := e.cli(nil, "paused")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "Squatter")
	_, err = op.SetPaused(ctx, false, "test", "")
	var notOurs *control.NotOursError
	require.ErrorAs(t, err, &notOurs)
	require.Equal(t, "Squatter", notOurs.Type)
	for _, ev := range e.runHistory(controlID, run.GetRunID()) {
		require.Nil(t, ev.GetWorkflowExecutionSignaledEventAttributes(), "the squatter was signaled")
	}

	// terminated, it still hides the state (its closed run holds the ID) until the operator resumes
	require.NoError(t, plain.TerminateWorkflow(ctx, controlID, run.GetRunID(), "test"))
	_, err = op.Control().State(ctx)
	require.ErrorIs(t, err, control.ErrUnreadable)
	_, err = op.SetPaused(ctx, false, "test", "squatter removed")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := op.Control().State(ctx)
		return err == nil && !st.Paused && st.Reason == "squatter removed"
	}, 30*time.Second, 200*time.Millisecond, "the provisioner's control workflow answers again")
	require.True(t, strings.HasPrefix(mustCLI(t, e, "paused"), "not paused"))
	e.sweepWhenRunning(ctx, svc)
	e.waitProvisioned(60*time.Second, fresh)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(svc.Metrics.ControlUnreadable.WithLabelValues(e.cfg.Site)) == 0
	}, 30*time.Second, 200*time.Millisecond)

	// the provisioner's own control workflow ended by someone: held the same, until hosts resume
	require.NoError(t, plain.TerminateWorkflow(ctx, controlID, "", "test"))
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(svc.Metrics.ControlUnreadable.WithLabelValues(e.cfg.Site)) == 1
	}, 30*time.Second, 200*time.Millisecond, "an ended control workflow is unreadable")
	out, code = e.cli(nil, "paused")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "Terminated", out)
	late := e.startedNotRun(ctx, svc, 2, "the control workflow was ended")
	_, err = op.SetPaused(ctx, false, "test", "")
	require.NoError(t, err)
	e.sweepWhenRunning(ctx, svc)
	e.waitProvisioned(60*time.Second, late)
}

func mustCLI(t *testing.T, e *env, args ...string) string {
	t.Helper()
	out, code := e.cli(nil, args...)
	require.Equal(t, 0, code, out)
	return out
}

// startedNotRun starts fleet server i while new hosts are held (why), waits until discovery
// held its startup event, sweeps, and checks that no run was started for it.
func (e *env) startedNotRun(ctx context.Context, svc *service.Service, i int, why string) *devstack.FleetMember {
	e.t.Helper()
	m, err := e.stack.Fleet.Start(i)
	require.NoError(e.t, err)
	e.waitEventHeld(m)
	_, err = svc.Sweep(ctx)
	require.NoError(e.t, err)
	_, err = e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(m.Identity), "")
	var notFound *serviceerror.NotFound
	require.True(e.t, errors.As(err, &notFound), "a host started while %s: %v", why, err)
	return m
}

// waitEventHeld waits until discovery logged m's startup event as held by the pause (or by a
// pause state it cannot read): the event was judged then, and starts nothing afterwards, however
// long it took to arrive.
func (e *env) waitEventHeld(m *devstack.FleetMember) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		return e.replicaLogLines("not starting work for a startup event", `"identity":"`+m.Identity+`"`) > 0
	}, 30*time.Second, 100*time.Millisecond, "discovery never held the startup event of %s", m.Identity)
}

// replicaLogLines counts the lines of every replica's log (this process's) that contain every
// one of parts.
func (e *env) replicaLogLines(parts ...string) int {
	e.t.Helper()
	logs, err := filepath.Glob(filepath.Join(e.stack.Opts.Dir, "*.log"))
	require.NoError(e.t, err)
	n := 0
	for _, l := range logs {
		n += e.logLines(strings.TrimSuffix(filepath.Base(l), ".log"), parts...)
	}
	return n
}

// sweepWhenRunning sweeps until a sweep runs, as discover_cycles counts it (a sweep discovery
// takes as paused is skipped, uncounted): discovery's cached pause state has caught up with the
// resume by then, however long its cache holds it.
func (e *env) sweepWhenRunning(ctx context.Context, svc *service.Service) {
	e.t.Helper()
	cycles := func() float64 { return testutil.ToFloat64(svc.Metrics.DiscoverCycles.WithLabelValues(e.cfg.Site)) }
	var err error
	require.Eventually(e.t, func() bool {
		before := cycles()
		_, err = svc.Sweep(ctx)
		return cycles() > before
	}, 30*time.Second, 100*time.Millisecond, "no sweep ran after the resume")
	require.NoError(e.t, err, "the sweep that ran")
}
