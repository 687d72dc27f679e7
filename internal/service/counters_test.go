package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/workflows"
)

// helperScript fails its first failures runs (every run when failures < 0), then configures.
func helperScript(t *testing.T, failures int) []string {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "helper.sh")
	body := fmt.Sprintf(`#!/bin/sh
cat >/dev/null
n=$(cat %[1]s/runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s/runs
if [ %[2]d -lt 0 ] || [ $n -le %[2]d ]; then echo "CA is down" >&2; exit 1; fi
echo '{"defer": false, "msg": "ok", "configuration": {"plugin.choria.server.provision": "false"}}'
`, dir, failures)
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	return []string{"sh", script}
}

// provisionOnce runs one host's workflow to its end with the real helper activity, the real
// provision_errors interceptor and stand-ins for the RPCs.
func provisionOnce(t *testing.T, m *metrics.Metrics, log *zap.Logger, helper []string) error {
	t.Helper()
	return provisionWithRestart(t, m, log, helper, func(context.Context, activities.RestartInput) (*activities.MessageResult, error) {
		return &activities.MessageResult{Message: "restarting"}, nil
	})
}

// provisionWithRestart is provisionOnce with restart standing in for the restart step.
func provisionWithRestart(t *testing.T, m *metrics.Metrics, log *zap.Logger, helper []string,
	restart func(context.Context, activities.RestartInput) (*activities.MessageResult, error)) error {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflows.WorkflowID("n1.example")})
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{ProvisionErrors(m)}})
	workflows.Register(env, Policy(&config.Config{Site: m.Site}))
	acts := activities.New(nil, activities.Settings{Site: m.Site, HelperCommand: helper, HelperTimeout: 10 * time.Second}, m, log)
	// the helper as the worker registers it (with the shared finish), the RPCs stood in for
	acts.Register(only{env, activities.RunHelperName})
	// the stand-ins answer each request with its seal, as the activities' wrapper does
	env.RegisterActivityWithOptions(func(_ context.Context, in activities.HostInput) (*activities.InventoryResult, error) {
		r := &activities.InventoryResult{Inventory: "{}", Version: "0.30.2"}
		r.SetReply(in.Request)
		return r, nil
	}, activity.RegisterOptions{Name: activities.InventoryName})
	env.RegisterActivityWithOptions(func(_ context.Context, in activities.ConfigureInput) (*activities.MessageResult, error) {
		r := &activities.MessageResult{Message: "configured"}
		r.SetReply(in.Request)
		return r, nil
	}, activity.RegisterOptions{Name: activities.ConfigureName})
	// the stand-in answers with the request's seal, as the activities' wrapper does
	env.RegisterActivityWithOptions(func(ctx context.Context, in activities.RestartInput) (*activities.MessageResult, error) {
		r, err := restart(ctx, in)
		if err != nil {
			return nil, activities.SealFailure(err, 1, in.Request)
		}
		r.SetReply(in.Request)
		return r, nil
	}, activity.RegisterOptions{Name: activities.RestartName})
	env.ExecuteWorkflow(workflows.WorkflowName, workflows.ProvisionInput{Identity: "n1.example"})
	require.True(t, env.IsWorkflowCompleted())
	return env.GetWorkflowError()
}

// provision_errors counts runs that end failed, once each, and failed_runs_total by step; helper_errors every failed helper
// run; "no retries left" is logged at error only on the workflow's last try of the helper.
func TestProvisionErrorsOncePerFailedRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "dc1")
	require.NoError(t, err)
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(core)
	count := func(msg string) int { return logs.FilterMessage(msg).Len() }

	// fails twice, then configures: no provisioning error
	require.NoError(t, provisionOnce(t, m, log, helperScript(t, 2)))
	require.Equal(t, 2.0, testutil.ToFloat64(m.HelperErrors.WithLabelValues("dc1")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.ProvisionErrors.WithLabelValues("dc1")))
	require.Equal(t, 2, count("step failed, will retry"))
	require.Equal(t, 0, count("step failed, no retries left"))

	// fails all five tries: one provisioning error, one final error line
	err = provisionOnce(t, m, log, helperScript(t, -1))
	require.ErrorContains(t, err, "CA is down")
	require.Equal(t, 7.0, testutil.ToFloat64(m.HelperErrors.WithLabelValues("dc1")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.ProvisionErrors.WithLabelValues("dc1")))
	require.Equal(t, 1, testutil.CollectAndCount(m.FailedRuns), "one step label: the one the run failed at")
	require.Equal(t, 1.0, testutil.ToFloat64(m.FailedRuns.WithLabelValues("dc1", workflows.StepHelper)))
	for _, e := range logs.All() {
		t.Logf("%s %s %v", e.Level, e.Message, e.ContextMap())
	}
	require.Equal(t, 2+4, count("step failed, will retry"))
	final := logs.FilterMessage("step failed, no retries left").All()
	require.Len(t, final, 1)
	require.Equal(t, zap.ErrorLevel, final[0].Level)
	require.Equal(t, uint64(8), helperRuns(t, reg), "every helper run is timed")
}

// choria_provisioner_provisioned counts runs that provisioned their host, once each, where the
// run's outcome is decided: a restart the server did not confirm (it had already gone) counts,
// a restart step run again after a lost completion counts once, a failed run not at all.
func TestProvisionedOncePerRun(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "dc1")
	require.NoError(t, err)
	provisioned := func() float64 { return testutil.ToFloat64(m.Provisioned.WithLabelValues("dc1")) }

	require.NoError(t, provisionOnce(t, m, zap.NewNop(), helperScript(t, 0)))
	require.Equal(t, 1.0, provisioned(), "a run that restarted its server")

	// the configured server restarted before it answered the restart request
	require.NoError(t, provisionWithRestart(t, m, zap.NewNop(), helperScript(t, 0),
		func(context.Context, activities.RestartInput) (*activities.MessageResult, error) {
			return nil, activities.NewError(activities.ErrTypeNoReply, "choria_provision#restart: no reply", nil)
		}))
	require.Equal(t, 2.0, provisioned(), "an unconfirmed restart provisioned the host too")

	// the step's first try restarted the server, but its completion was lost: it runs again
	tries := 0
	require.NoError(t, provisionWithRestart(t, m, zap.NewNop(), helperScript(t, 0),
		func(context.Context, activities.RestartInput) (*activities.MessageResult, error) {
			if tries++; tries == 1 {
				return nil, activities.NewError(activities.ErrTypeRPC, "the worker lost the reply", nil)
			}
			return &activities.MessageResult{Message: "restarting"}, nil
		}))
	require.Equal(t, 2, tries)
	require.Equal(t, 3.0, provisioned(), "one run, one host: counted once")

	require.Error(t, provisionOnce(t, m, zap.NewNop(), helperScript(t, -1)))
	require.Equal(t, 3.0, provisioned(), "a failed run provisioned nothing")
}

func helperRuns(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "choria_provisioner_helper_time" {
			return f.GetMetric()[0].GetSummary().GetSampleCount()
		}
	}
	t.Fatal("no helper_time series")
	return 0
}

// only registers the one activity named.
type only struct {
	env  *testsuite.TestWorkflowEnvironment
	name string
}

func (o only) RegisterActivityWithOptions(a any, opts activity.RegisterOptions) {
	if opts.Name == o.name {
		o.env.RegisterActivityWithOptions(a, opts)
	}
}
