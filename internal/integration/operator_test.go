package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/discovery"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// switchableHelper wraps the example helper: while helper-broken exists in the state directory it
// fails like a helper whose CA is down; while helper-slow exists it takes 8 s.
func switchableHelper(t *testing.T) func(s *devstack.Stack) string {
	return func(s *devstack.Stack) string {
		script := filepath.Join(s.Opts.Dir, "switchable-helper.sh")
		body := fmt.Sprintf(`#!/bin/sh
input=$(cat)
if [ -f %[1]s/helper-broken ]; then echo "CA is down" >&2; exit 1; fi
echo run >> %[1]s/helper-runs
if [ -f %[1]s/helper-slow ]; then sleep 8; fi
printf '%%s' "$input" | %[2]s
`, s.Opts.Dir, s.HelperCommand)
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}
}

func (e *env) operator() *operator.Operator {
	dc, _, err := service.DataConverter(e.cfg)
	require.NoError(e.t, err)
	return &operator.Operator{C: e.client, DC: dc, TaskQueue: e.cfg.Temporal.TaskQueue, Namespace: e.cfg.Temporal.Namespace}
}

// cli runs the operator CLI binary and returns its output and exit code.
func (e *env) cli(env []string, args ...string) (string, int) {
	return e.run(env, append([]string{"hosts", "--config", e.stack.ConfigFile}, args...)...)
}

// cliCmd runs any choria-provisioner command.
func (e *env) cliCmd(args ...string) (string, int) { return e.run(nil, args...) }

func (e *env) run(env []string, args ...string) (string, int) {
	e.t.Helper()
	return runBinary(e.t, selfBinary, env, args...)
}

// countLines is how many lines a file in the stack's directory has (0 when it does not exist).
func countLines(e *env, name string) int {
	b, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, name))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func (e *env) setFlag(name string, on bool) {
	f := filepath.Join(e.stack.Opts.Dir, name)
	if on {
		require.NoError(e.t, os.WriteFile(f, nil, 0o600))
	} else {
		require.NoError(e.t, os.Remove(f))
	}
}

// Hosts fail while the helper's CA is down; operators see which and why, then recover all of
// them with one command once it is back; reprovision takes a provisioned server through again.
func TestIntegrationOperatorsRecoverFailedHosts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 4, helper: switchableHelper(t)})
	e.setFlag("helper-broken", true)
	svc := e.provisioner("replica-a")
	op := e.operator()
	ctx := context.Background()

	e.waitFailed(4) // every host fails while the helper is broken
	// five helper runs per host, one provisioning error per failed host, one final error line each
	require.Equal(t, 20.0, testutil.ToFloat64(svc.Metrics.HelperErrors.WithLabelValues("dev")))
	require.Equal(t, 4.0, testutil.ToFloat64(svc.Metrics.ProvisionErrors.WithLabelValues("dev")))
	require.Equal(t, 4.0, testutil.ToFloat64(svc.Metrics.FailedRuns.WithLabelValues("dev", workflows.StepHelper)))
	require.Equal(t, 4, e.logLines("replica-a", `"level":"error"`, "step failed, no retries left"))

	hosts, err := op.List(ctx, operator.Filter{Outcome: workflows.OutcomeFailed, Step: workflows.StepHelper, Site: "dev"})
	require.NoError(t, err)
	require.Len(t, hosts, 4)
	for _, h := range hosts {
		require.Equal(t, "Failed", h.Status)
		require.Equal(t, "HelperError at helper (hosts show: why)", h.Reason, "the error type and step, from visibility")
	}
	full, err := op.ListPage(ctx, operator.Filter{Outcome: workflows.OutcomeFailed, Step: workflows.StepHelper, Site: "dev"}, operator.Page{FullReasons: true})
	require.NoError(t, err)
	require.Len(t, full.Hosts, 4)
	for _, h := range full.Hosts {
		require.Contains(t, h.Reason, "CA is down", "the reason, from the history")
		require.Contains(t, h.Reason, "step helper")
	}
	out, code := e.cli(nil, "list", "--outcome", "failed")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "4 hosts")
	require.Contains(t, out, e.stack.Fleet.Identity(2))

	d, err := op.Show(ctx, e.stack.Fleet.Identity(0))
	require.NoError(t, err)
	require.NotNil(t, d.State)
	helperRuns := 0
	for _, r := range d.State.Timeline {
		if r.Step == workflows.StepHelper {
			helperRuns++
			require.Contains(t, r.Error, "CA is down")
		}
	}
	require.Equal(t, 5, helperRuns)
	out, code = e.cli(nil, "show", e.stack.Fleet.Identity(0))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "CA is down")
	require.Contains(t, out, "Timeline:")

	out, code = e.cli(nil, "show", "no-such-host.example")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "unknown host")
	out, code = e.cli([]string{"PROVISIONER_TEMPORAL__ADDRESS=127.0.0.1:1"}, "list")
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "unreachable")

	e.setFlag("helper-broken", false)
	start := time.Now()
	out, code = e.cli(nil, "retry", "--failed")
	t.Logf("retry --failed of 4 hosts took %v: %s", time.Since(start), out)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "retried 4 hosts")
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members...)
	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m)
		e.runs(m.Identity, 2)
	}
	out, code = e.cli(nil, "retry", e.stack.Fleet.Identity(1))
	require.Equal(t, 1, code, "a provisioned host is not retried: %s", out)

	// reprovision: the server goes back to provisioning mode and is provisioned by a new run
	m := e.stack.Fleet.Members[0]
	seedBefore, err := os.ReadFile(filepath.Join(m.Dir, "server.seed"))
	require.NoError(t, err)
	out, code = e.cli(nil, "reprovision", m.Identity, "--choria-config", e.stack.AdminConfig)
	require.Equal(t, 0, code, out)
	require.Eventually(t, func() bool {
		seed, err := os.ReadFile(filepath.Join(m.Dir, "server.seed"))
		return err == nil && !bytes.Equal(seed, seedBefore) && devstack.Provisioned(m) && runningProvisioned(m)
	}, 90*time.Second, 500*time.Millisecond, "reprovisioned server should be provisioned again with a new key")
	e.runs(m.Identity, 3)
	e.verifyServerJWT(m)
}

// A fleet-wide pause starts no new hosts and holds running ones before their next step.
func TestIntegrationPauseHoldsNewAndRunningHosts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 1, helper: switchableHelper(t)})
	svc := e.provisioner("replica-a")
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members...)
	op := e.operator()
	ctx := context.Background()

	// a host in flight when the pause comes holds after its current step
	e.setFlag("helper-slow", true)
	slow, err := e.stack.Fleet.Start(1)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := op.Show(ctx, slow.Identity)
		return err == nil && d.Step == workflows.StepHelper
	}, 60*time.Second, 100*time.Millisecond)
	n, err := op.SetPaused(ctx, true, "test", "maintenance")
	require.NoError(t, err)
	hosts, _ := op.List(ctx, operator.Filter{})
	require.Equal(t, 1, n, "%+v", hosts)

	// a new host is not started while paused
	fresh, err := e.stack.Fleet.Start(2)
	require.NoError(t, err)
	e.waitEventHeld(fresh)
	_, err = svc.Sweep(ctx)
	require.NoError(t, err)
	_, err = e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(fresh.Identity), "")
	var notFound *serviceerror.NotFound
	require.True(t, errors.As(err, &notFound), "no workflow may start while paused: %v", err)

	d, err := op.Show(ctx, slow.Identity)
	require.NoError(t, err)
	require.True(t, d.State.Paused)
	require.Equal(t, workflows.StepHelper, d.State.Step, "held before configure")
	require.False(t, devstack.Provisioned(slow))
	out, code := e.cli(nil, "paused")
	require.Equal(t, 0, code)
	require.True(t, strings.HasPrefix(out, "paused since"), out)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(svc.Metrics.Paused.WithLabelValues("dev")) == 1 &&
			testutil.ToFloat64(svc.Metrics.WaitingNodes.WithLabelValues("dev")) >= 1
	}, 25*time.Second, 500*time.Millisecond, "paused and waiting_nodes (a held host is found and not done) follow Temporal")

	_, err = op.SetPaused(ctx, false, "test", "")
	require.NoError(t, err)
	e.setFlag("helper-slow", false)
	e.sweepWhenRunning(ctx, svc) // once discovery's cached state says running
	e.waitProvisioned(60*time.Second, slow, fresh)
	e.runs(slow.Identity, 1)
	e.runs(fresh.Identity, 1)
	e.writeReplayHistoryOf("control-pause-resume", workflows.ControlWorkflowID(e.cfg.Temporal.TaskQueue))
	e.writeReplayHistory("provision-paused-in-helper", slow.Identity) // pause and resume signals mid-run
}

// A failed host is retried automatically when it is sighted again: the next sweep starts a new
// run, which provisions it once the cause is gone.
func TestIntegrationFailedHostRetriedOnNextSighting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 1, helper: switchableHelper(t)})
	e.setFlag("helper-broken", true)
	svc := e.provisioner("replica-a")
	m := e.stack.Fleet.Members[0]
	e.waitOutcome(m.Identity, workflows.OutcomeFailed)
	e.setFlag("helper-broken", false)
	_, err := svc.Sweep(context.Background())
	require.NoError(t, err)
	e.waitProvisioned(60*time.Second, m)
	e.runs(m.Identity, 2)
}

// setup registers the search attributes on a namespace and may run again and again.
func TestIntegrationSetupIsIdempotent(t *testing.T) {
	e := newEnv(t, envOptions{servers: 0})
	for i := 0; i < 3; i++ {
		out, code := e.cliCmd("setup", "--config", e.stack.ConfigFile, "--retention", "720h")
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "ready for the provisioner")
	}
}

// `hosts cancel` ends a host's running workflow; the host is not configured.
func TestIntegrationCancelHost(t *testing.T) {
	e := newEnv(t, envOptions{servers: 1, helper: switchableHelper(t)})
	e.setFlag("helper-slow", true)
	e.provisioner("replica-a")
	m := e.stack.Fleet.Members[0]
	e.waitInFlight(1)
	out, code := e.cli(nil, "cancel", m.Identity)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "canceled "+m.Identity)
	require.Eventually(t, func() bool {
		d, err := e.operator().Show(context.Background(), m.Identity)
		return err == nil && d.Host.Status == "Canceled"
	}, 30*time.Second, 200*time.Millisecond)
	require.False(t, devstack.Provisioned(m))
	out, code = e.cli(nil, "cancel", "no-such-host.example")
	require.Equal(t, 2, code, out)
}

// logLines counts the lines of a replica's log that contain every one of parts.
func (e *env) logLines(replica string, parts ...string) int {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, replica+".log"))
	require.NoError(e.t, err)
	n := 0
lines:
	for _, l := range strings.Split(string(b), "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue lines
			}
		}
		n++
	}
	return n
}

// A sweep judges the hosts at work by one listing of the open runs in the real visibility
// store: a run waiting for its first workflow task is listed (as a burst's hosts wait), one in
// its helper is not (it may be past its restart: described, as before), a closed one is not.
func TestIntegrationSweepListsTheRunsAtWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 1, helper: switchableHelper(t)})
	ctx := context.Background()
	svc := e.provisioner("replica-a")
	done := e.stack.Fleet.Members[0]
	e.waitProvisioned(60*time.Second, done)

	e.setFlag("helper-slow", true)
	slow, err := e.stack.Fleet.Start(1)
	require.NoError(t, err)
	op := e.operator()
	require.Eventually(t, func() bool {
		d, err := op.Show(ctx, slow.Identity)
		return err == nil && d.Step == workflows.StepHelper
	}, 60*time.Second, 100*time.Millisecond)

	waiting := e.stack.Opts.IdentityPrefix + "waiting"
	in := workflows.ProvisionInput{Identity: waiting, Source: workflows.SourceOperator}
	opts := service.Starter(e.cfg).Options(in)
	opts.TaskQueue += "-nobody-polls"
	_, err = e.client.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, in)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.client.TerminateWorkflow(ctx, workflows.WorkflowID(waiting), "", "test over") })

	var ids map[string]struct{}
	require.Eventually(t, func() bool {
		ids, err = discovery.AbsorbingRuns(ctx, e.client, opts.TaskQueue)
		_, listed := ids[workflows.WorkflowID(waiting)]
		return err == nil && listed
	}, 20*time.Second, 200*time.Millisecond, "the waiting run is not listed as at work on its task queue: %v", err)
	ids, err = discovery.AbsorbingRuns(ctx, e.client, e.cfg.Temporal.TaskQueue)
	require.NoError(t, err)
	require.NotContains(t, ids, workflows.WorkflowID(waiting), "a run on another task queue is no run of this provisioner's")
	require.NotContains(t, ids, workflows.WorkflowID(slow.Identity), "a run in its helper is described, not listed")
	require.NotContains(t, ids, workflows.WorkflowID(done.Identity), "a closed run is not at work")

	// the sweep finds the slow host in provisioning mode: its run absorbs the sighting
	handed, err := svc.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, handed)
	e.setFlag("helper-slow", false)
	e.waitProvisioned(60*time.Second, slow)
	e.runs(slow.Identity, 1)
}

// jsonLines parses the lines of out that are JSON objects (a command's stderr lines are not).
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var got []T
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var v T
		require.NoError(t, json.Unmarshal([]byte(l), &v), l)
		got = append(got, v)
	}
	return got
}

// `hosts list` and `hosts retry --failed` at work on a site where a namespace client started a
// workflow of its own under a failed host's workflow ID: the listing pages and prints JSON lines;
// the retry retries the provisioner's failed hosts only, says it skipped the squatted one and
// exits non-zero (its --dry-run too, starting nothing); and the squatter does not keep discovery
// from provisioning the host: the next sweep's run replaces it.
func TestIntegrationRetryFailedSkipsWhatIsNotOurs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 3, helper: switchableHelper(t), interval: "1h"})
	e.setFlag("helper-broken", true)
	svc := e.provisioner("replica-a")
	ctx := context.Background()
	e.waitFailed(3)

	squatted := e.stack.Fleet.Members[2]
	squat, err := e.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.WorkflowID(squatted.Identity),
		TaskQueue: e.cfg.Temporal.TaskQueue + "-squatter"}, "Squat")
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.client.TerminateWorkflow(ctx, squat.GetID(), squat.GetRunID(), "test over") })
	failed := []string{e.stack.Fleet.Identity(0), e.stack.Fleet.Identity(1)}

	var hosts []operator.Host
	require.Eventually(t, func() bool {
		out, code := e.cli(nil, "list", "--outcome", "failed", "--json")
		hosts = jsonLines[operator.Host](t, out)
		return code == 0 && len(hosts) == 2
	}, 20*time.Second, 250*time.Millisecond, "the squatted host's latest run is not a failed one: %+v", hosts)
	for _, h := range hosts {
		require.Contains(t, failed, h.Identity)
		require.Equal(t, workflows.OutcomeFailed, h.Outcome)
		require.Contains(t, h.Reason, "HelperError at helper")
	}

	// two pages of one host
	out, code := e.cli(nil, "list", "--outcome", "failed", "--limit", "1")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "1 hosts")
	_, token, ok := strings.Cut(out, "more: --after ")
	require.True(t, ok, out)
	next, code := e.cli(nil, "list", "--outcome", "failed", "--after", strings.TrimSpace(token))
	require.Equal(t, 0, code, next)
	require.Contains(t, next, "1 hosts")
	require.NotContains(t, next, "more:")
	for _, id := range failed {
		require.True(t, strings.Contains(out, id) != strings.Contains(next, id), "%s on one page exactly:\n%s\n%s", id, out, next)
	}

	out, code = e.cli(nil, "retry", squatted.Identity)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "not a provisioner's")
	out, code = e.cli(nil, "show", squatted.Identity)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `someone else, not a provisioner's run: workflow type "Squat"`)

	out, code = e.cli(nil, "retry", "--failed", "--dry-run")
	require.Equal(t, 1, code, "a skipped host fails the command: %s", out)
	require.Contains(t, out, "would retry 2 hosts, skipped 1")
	require.Contains(t, out, squatted.Identity+`: not a provisioner's run: workflow type "Squat"`)
	for _, id := range failed {
		require.Contains(t, out, "would retry "+id)
		e.runs(id, 1)
	}

	e.setFlag("helper-broken", false)
	out, code = e.cli(nil, "retry", "--failed", "--json")
	require.Equal(t, 1, code, out)
	require.NotContains(t, out, "\r", "no progress bar when stdout is not a terminal")
	type action struct{ Identity, Action, Reason string }
	got := map[string]string{}
	for _, a := range jsonLines[action](t, out) {
		got[a.Identity] = a.Action
	}
	require.Equal(t, map[string]string{failed[0]: "retried", failed[1]: "retried", squatted.Identity: "skipped"}, got)
	e.waitProvisioned(60*time.Second, e.stack.Fleet.Members[:2]...)

	// the squatted host is still in provisioning mode: a sweep finds it and its run replaces the
	// squatter
	_, err = svc.Sweep(ctx)
	require.NoError(t, err)
	e.waitProvisioned(60*time.Second, squatted)
	desc, err := e.client.DescribeWorkflowExecution(ctx, squat.GetID(), squat.GetRunID())
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, desc.GetWorkflowExecutionInfo().GetStatus())
}
