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

	"github.com/choria-temporal/provisioner/internal/metrics"
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
		err := workflow.ExecuteActivity(ctx, reg.name, in).Get(ctx, &out)
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

// Any namespace client can schedule our activities on our task queue by name: a task that a
// host's ProvisionHost did not schedule for its own host is refused before the step runs,
// not retried, logged and counted.
func TestAdmitRefusesTasksOfOtherWorkflowsAndHosts(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	core, logs := observer.New(zap.WarnLevel)
	a := &Activities{metrics: m, log: zap.New(core), set: Settings{Site: "lab"}}
	ran := 0
	sign := wrap(a, SignServerJWTName, StepSign, func(ctx context.Context, in SignInput) (string, error) {
		ran++
		return "signed", nil
	})
	in := SignInput{Identity: "intruder.example", PublicKey: "ab"}
	for _, c := range []struct{ name, wfType, wfID, reason string }{
		{"another workflow type", "Intruder", "intruder-1", ReasonForeignWorkflow},
		{"another type with a host's workflow ID", "Intruder", "provision:intruder.example", ReasonForeignWorkflow},
		{"ProvisionHost under another ID", HostWorkflowType, "intruder-1", ReasonForeignWorkflow},
		{"another host's ProvisionHost", HostWorkflowType, "provision:real.example", ReasonIdentityMismatch},
	} {
		_, err := runAs[string](t, c.wfType, c.wfID, sign, in)
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

	out, err := runAs[string](t, HostWorkflowType, "provision:intruder.example", sign, in)
	require.NoError(t, err, "the host's own workflow")
	require.Equal(t, "signed", out)
	require.Equal(t, 1, ran)
}
