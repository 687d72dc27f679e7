package activities

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/choria-temporal/provisioner/common/metrics"
)

// runAs runs reg's activity with in as a workflow of type wfType and ID wfID schedules it, once.
func runAs[O any](t *testing.T, wfType, wfID string, reg registration, in any) (O, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	// a loaded machine is no deadlock: the workflow only waits for its one activity
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
	env.RegisterActivityWithOptions(reg.wrapped, activity.RegisterOptions{Name: reg.name})
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (O, error) {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		var out O
		err := workflow.ExecuteActivity(ctx, reg.name, sealAs(ctx, reg.step, in)).Get(ctx, &out)
		return out, err
	}, workflow.RegisterOptions{Name: wfType})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: wfID})
	env.ExecuteWorkflow(wfType)
	require.True(t, env.IsWorkflowCompleted())
	var out O
	if err := env.GetWorkflowError(); err != nil {
		return out, err
	}
	require.NoError(t, env.GetWorkflowResult(&out))
	return out, nil
}

// thisRun stands, in a test's seal, for the run ID of the run that schedules the task.
const thisRun = "this-run"

// sealAs seals in as the host's workflow does (Run "n1", request 1 of step), unless the test set
// its step; thisRun as its run ID is the scheduling run's.
func sealAs(ctx workflow.Context, step string, in any) any {
	s, ok := in.(interface {
		GetRequest() Seal
		WithRequest(Seal) any
	})
	if !ok {
		return in
	}
	req := s.GetRequest()
	if req.Step == "" {
		req = Seal{Run: "n1", RunID: thisRun, Step: step, Seq: 1, At: workflow.Now(ctx)}
	}
	run := workflow.GetInfo(ctx).WorkflowExecution.RunID
	if req.RunID == thisRun {
		req.RunID = run
	}
	switch in := s.WithRequest(req).(type) {
	case SignInput:
		in.Approval = approvedIn(in.Approval, run)
		return in
	case ConfigureInput:
		in.Approval = approvedIn(in.Approval, run)
		return in
	default:
		return in
	}
}

// approvedIn is a, or one reply received by thisRun when a names none, with thisRun as run.
func approvedIn(a Approval, run string) Approval {
	if a.Facts == nil {
		a.Facts = []Seal{{Run: "n1", RunID: thisRun, Step: StepHelper, Seq: 1}}
	}
	facts := make([]Seal, len(a.Facts))
	for i, f := range a.Facts {
		if f.RunID == thisRun {
			f.RunID = run
		}
		facts[i] = f
	}
	return Approval{Facts: facts}
}

// Any namespace client can schedule our activities on our task queue by name: a task that a
// host's ProvisionHost did not schedule for its own host is refused before the step runs,
// not retried, logged and counted.
func TestAdmitRefusesTasksOfOtherWorkflowsAndHosts(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	core, logs := observer.New(zap.WarnLevel)
	a := &Activities{metrics: m, log: zap.New(core), set: Settings{Site: "lab"}}
	ran := 0
	sign := wrapNamed(a, SignServerJWTName, StepSign, func(ctx context.Context, in SignInput) (*SignResult, error) {
		ran++
		return &SignResult{JWT: "signed"}, nil
	})
	in := SignInput{Identity: "intruder.example", PublicKey: "ab"}
	for _, c := range []struct{ name, wfType, wfID, reason string }{
		{"another workflow type", "Intruder", "intruder-1", ReasonForeignWorkflow},
		{"another type with a host's workflow ID", "Intruder", "provision:intruder.example", ReasonForeignWorkflow},
		{"ProvisionHost under another ID", HostWorkflowType, "intruder-1", ReasonForeignWorkflow},
		{"another host's ProvisionHost", HostWorkflowType, "provision:real.example", ReasonIdentityMismatch},
	} {
		_, err := runAs[SignResult](t, c.wfType, c.wfID, sign, in)
		var app *temporal.ApplicationError
		require.True(t, errors.As(err, &app), "%s: %v", c.name, err)
		require.Equal(t, ErrTypeRefused, app.Type(), c.name)
		require.True(t, app.NonRetryable(), c.name)
		require.Contains(t, app.Error(), "SignServerJWT refused", c.name)
		require.Equal(t, 0, ran, "%s: the step did not run", c.name)
	}
	require.Equal(t, 3.0, testutil.ToFloat64(m.RefusedPayloads.WithLabelValues("lab", ReasonForeignWorkflow)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.RefusedPayloads.WithLabelValues("lab", ReasonIdentityMismatch)))
	require.Equal(t, 4, logs.FilterMessage("task refused").Len())
	require.Equal(t, "provision:real.example", logs.All()[3].ContextMap()["workflow_id"])

	out, err := runAs[SignResult](t, HostWorkflowType, "provision:intruder.example", sign, in)
	require.NoError(t, err, "the host's own workflow")
	require.Equal(t, "signed", out.JWT)
	require.Equal(t, 1, ran)
	require.Equal(t, "n1", out.Reply.Run, "the result answers the request")
	require.Equal(t, StepSign, out.Reply.Step)
	require.Equal(t, 1, out.Reply.Seq)
}

// An input its task's run did not seal for the activity's step is refused before the step runs,
// counted, and the refusal carries the input's seal (the workflow recognises a reset's request).
func TestAdmitRefusesInputsOfOtherRunsAndSteps(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	a := &Activities{metrics: m, log: zap.NewNop(), set: Settings{Site: "lab"}}
	ran := 0
	sign := wrapNamed(a, SignServerJWTName, StepSign, func(ctx context.Context, in SignInput) (*SignResult, error) {
		ran++
		return &SignResult{JWT: "signed"}, nil
	})
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		seal    Seal
		errType string
	}{
		{"an earlier run's input", Seal{Run: "old", RunID: "0191-earlier-run", Step: StepSign, Seq: 7, At: at}, ErrTypeOtherRun},
		{"another step's input", Seal{Run: "n1", RunID: thisRun, Step: StepConfigure, Seq: 7, At: at}, ErrTypeRefused},
		{"an input without a nonce", Seal{RunID: thisRun, Step: StepSign, Seq: 7, At: at}, ErrTypeRefused},
	} {
		in := SignInput{Identity: "n1.example", PublicKey: "ab"}
		in.Request = c.seal
		_, err := runAs[SignResult](t, HostWorkflowType, "provision:n1.example", sign, in)
		var app *temporal.ApplicationError
		require.True(t, errors.As(err, &app), "%s: %v", c.name, err)
		require.Equal(t, c.errType, app.Type(), c.name)
		require.True(t, app.NonRetryable(), c.name)
		_, reply, _, ok := FailureSeal(err)
		require.True(t, ok, "%s: the refusal is sealed", c.name)
		require.Equal(t, c.seal.Seq, reply.Seq, c.name)
		require.Equal(t, 0, ran, c.name)
	}
	require.Equal(t, 3.0, testutil.ToFloat64(m.RefusedPayloads.WithLabelValues("lab", ReasonForeignRequest)))
}
