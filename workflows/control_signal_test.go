package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/internal/signalgate"
)

// testQueue is the task queue of the SDK's test environment.
const testQueue = "default-test-taskqueue"

// admitControlSignals registers ControlSignals as a plaintext worker has it (the test
// environment has no codec), recording its refusals in refused (may be nil).
func admitControlSignals(env *testsuite.TestWorkflowEnvironment, refused *[]*RefusedSignalError) {
	gate := ControlSignals(converter.GetDefaultDataConverter(), func(e *RefusedSignalError) {
		if refused != nil {
			*refused = append(*refused, e)
		}
	})
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{signalgate.Interceptor(gate.Watch)}})
}

// stateAfterAMinute queries the control workflow's state a minute in and ends it; the returned
// function reads that state once the run is over.
func stateAfterAMinute(t *testing.T, env *testsuite.TestWorkflowEnvironment) func() ControlState {
	var st ControlState
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(ControlStateQuery)
		require.NoError(t, err)
		require.NoError(t, v.Get(&st))
		env.CancelWorkflow()
	}, time.Minute)
	return func() ControlState { return st }
}

// controlRequest is a request for action on the test environment's queue, made now.
func controlRequest(env *testsuite.TestWorkflowEnvironment, action string) ControlRequest {
	return ControlRequest{Action: action, TaskQueue: testQueue, By: "ops", At: env.Now()}
}

// hostRequest is a request for action on the queue the suite's host runs are started on, made now.
func (s *ProvisionSuite) hostRequest(action string) ControlRequest {
	r := controlRequest(s.env, action)
	r.TaskQueue = testStarter.TaskQueue
	return r
}

// Pause and resume signals that are not a request for their action on the run's own queue, made
// recently and in order, are refused with their reason and change nothing: in the control
// workflow and in a host's run.
func TestControlSignalsRefuseWhatIsNotARequest(t *testing.T) {
	type signal struct {
		name   string
		arg    func(env *testsuite.TestWorkflowEnvironment) any
		reason string
	}
	req := func(action string, edit func(*ControlRequest)) func(env *testsuite.TestWorkflowEnvironment) any {
		return func(env *testsuite.TestWorkflowEnvironment) any {
			r := controlRequest(env, action)
			edit(&r)
			return r
		}
	}
	forged := []signal{
		{PauseSignal, func(*testsuite.TestWorkflowEnvironment) any { return nil }, SignalEmpty},
		{PauseSignal, func(*testsuite.TestWorkflowEnvironment) any { return ControlState{Paused: true} }, SignalMalformed},
		{PauseSignal, func(*testsuite.TestWorkflowEnvironment) any { return "pause" }, SignalMalformed},
		{PauseSignal, req(ResumeSignal, func(*ControlRequest) {}), SignalMisdirected},
		{PauseSignal, req(PauseSignal, func(r *ControlRequest) { r.TaskQueue = "other" }), SignalMisdirected},
		{PauseSignal, req(PauseSignal, func(r *ControlRequest) { r.At = time.Time{} }), SignalMalformed},
		{PauseSignal, req(PauseSignal, func(r *ControlRequest) { r.At = r.At.Add(-2 * ControlRequestMaxAge) }), SignalStale},
		{PauseSignal, req(PauseSignal, func(r *ControlRequest) { r.At = r.At.Add(time.Hour) }), SignalStale},
		{ControlRequestChannel, req(PauseSignal, func(*ControlRequest) {}), SignalMisdirected},
	}
	t.Run("control workflow", func(t *testing.T) {
		var ts testsuite.WorkflowTestSuite
		env := ts.NewTestWorkflowEnvironment()
		env.RegisterWorkflowWithOptions(ProvisionerControl, workflow.RegisterOptions{Name: ControlWorkflowName})
		var refused []*RefusedSignalError
		admitControlSignals(env, &refused)
		for i, s := range forged {
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(s.name, s.arg(env)) }, time.Duration(i+1)*time.Second)
		}
		st := stateAfterAMinute(t, env)
		env.ExecuteWorkflow(ProvisionerControl, ControlState{})
		require.False(t, st().Paused, "a refused signal changed the state")
		require.Len(t, refused, len(forged))
		for i, s := range forged {
			require.Equal(t, s.reason, refused[i].Reason, "%d: %v", i, refused[i])
			require.ErrorIs(t, refused[i], ErrRefusedSignal)
		}
	})
	t.Run("older than the last accepted", func(t *testing.T) {
		var ts testsuite.WorkflowTestSuite
		env := ts.NewTestWorkflowEnvironment()
		env.RegisterWorkflowWithOptions(ProvisionerControl, workflow.RegisterOptions{Name: ControlWorkflowName})
		var refused []*RefusedSignalError
		admitControlSignals(env, &refused)
		var pause ControlRequest
		env.RegisterDelayedCallback(func() { pause = controlRequest(env, PauseSignal); env.SignalWorkflow(PauseSignal, pause) }, time.Second)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(ResumeSignal, controlRequest(env, ResumeSignal)) }, 2*time.Second)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(PauseSignal, pause) }, 3*time.Second) // the pause sent again
		st := stateAfterAMinute(t, env)
		env.ExecuteWorkflow(ProvisionerControl, ControlState{})
		require.False(t, st().Paused, "a pause sent again after the resume paused")
		require.Len(t, refused, 1)
		require.Equal(t, SignalStale, refused[0].Reason)
	})
}

func (s *ProvisionSuite) TestForgedPauseDoesNotHoldTheHost() {
	var refused []*RefusedSignalError
	admitControlSignals(s.env, &refused)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(PauseSignal, nil) }, 0)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(PauseSignal, ControlRequest{Action: PauseSignal, TaskQueue: "other", At: s.env.Now()})
	}, 0)
	// a sealed pause made well before the run started (copied from another run's history)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(PauseSignal, ControlRequest{Action: PauseSignal, TaskQueue: testStarter.TaskQueue, At: s.env.Now().Add(-2 * ControlRequestSkew)})
	}, 0)
	s.execute(Features{JWT: true}, input())
	s.Equal(OutcomeProvisioned, s.result().Outcome)
	s.Require().Len(refused, 3)
	s.Equal(SignalEmpty, refused[0].Reason)
	s.Equal(SignalMisdirected, refused[1].Reason)
	s.Equal(SignalStale, refused[2].Reason)
	s.Contains(refused[2].Error(), "before this run started")
	s.False(s.status().Paused)
}
