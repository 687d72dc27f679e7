package discovery

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/workflows"
)

func TestLateSweepSightingOfAHostProvisionedSinceIsDropped(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	completed := func(at time.Time) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, CloseTime: timestamppb.New(at)}
	}
	cases := []struct {
		name      string
		seenAt    time.Time
		source    string
		latest    *workflowpb.WorkflowExecutionInfo
		started   int
		described int
	}{
		{"late, provisioned since", now.Add(-10 * time.Second), workflows.SourceDiscovery, completed(now.Add(-5 * time.Second)), 0, 1},
		{"late, provisioned before the sweep", now.Add(-10 * time.Second), workflows.SourceDiscovery, completed(now.Add(-20 * time.Second)), 1, 1},
		{"late, failed since", now.Add(-10 * time.Second), workflows.SourceDiscovery,
			&workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, CloseTime: timestamppb.New(now.Add(-5 * time.Second))}, 1, 1},
		{"late, never seen before", now.Add(-10 * time.Second), workflows.SourceDiscovery, nil, 1, 1},
		{"sweep sighting of a running host: nothing to do", now.Add(-10 * time.Second), workflows.SourceDiscovery,
			&workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}, 0, 1},
		{"late startup event of a running host: signalled", now.Add(-10 * time.Second), workflows.SourceEvent,
			&workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}, 1, 1},
		{"provisioned a moment after the sweep began", now.Add(-2 * time.Second), workflows.SourceDiscovery, completed(now.Add(-time.Second)), 0, 1},
		{"prompt startup event: no check", now.Add(-100 * time.Millisecond), workflows.SourceEvent, completed(now.Add(-5 * time.Second)), 1, 0},
		{"startup event that waited, provisioned since", now.Add(-10 * time.Second), workflows.SourceEvent, completed(now.Add(-5 * time.Second)), 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &recordingStarter{latest: c.latest}
			d, m := newTestDiscoverer(t, s)
			d.now = func() time.Time { return now }
			require.NoError(t, d.Sighted(context.Background(), "n1", c.source, c.seenAt))
			require.Len(t, s.calls, c.started)
			require.Equal(t, c.described, s.described)
			stale := 0.0
			if c.started == 0 && c.latest.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				stale = 1
			}
			require.Equal(t, stale, testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))
		})
	}
}

// Staleness is judged by when the host's latest run restarted it (its result), not when the run
// closed: a run a stopped provisioner left after its restart RPC closes only when a provisioner
// comes back, after that provisioner's first sweep began.
func TestStalenessByRestartTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	sweep := now.Add(-time.Second) // the sweep began a second ago; the run closed just now
	closedNow := &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, CloseTime: timestamppb.New(now),
		Execution: &commonpb.WorkflowExecution{WorkflowId: "provision:n1", RunId: "r1"}}
	restarted := func(at time.Time) *workflows.ProvisionResult {
		return &workflows.ProvisionResult{Outcome: workflows.OutcomeProvisioned, RestartedAt: at, RestartSplay: 1}
	}
	cases := []struct {
		name    string
		result  *workflows.ProvisionResult
		started int
	}{
		// restarted 2 minutes ago; the provisioner was down, the run closed when it came back:
		// the host answering now is back in provisioning mode
		{"restarted long before the sweep, closed late", restarted(now.Add(-2 * time.Minute)), 1},
		// restarted 2 s before the sweep: the server re-executes up to splay+2 s later, so
		// its reply to the sweep may predate its restart
		{"restarted just before the sweep", restarted(sweep.Add(-2 * time.Second)), 0},
		{"restarted after the sweep began", restarted(sweep.Add(100 * time.Millisecond)), 0},
		{"a run that restarted nothing", &workflows.ProvisionResult{Outcome: workflows.OutcomeProvisioned}, 0},
		{"result unreadable: by the close time", nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &recordingStarter{latest: closedNow, result: c.result}
			d, m := newTestDiscoverer(t, s)
			d.now = func() time.Time { return now }
			require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, sweep))
			require.Equal(t, c.started, s.started())
			require.Equal(t, 1, s.results)
			require.Equal(t, float64(1-c.started), testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))
			// a stale sighting brings the next sweep forward, which finds a host re-imaged that soon
			require.Equal(t, 1-c.started, len(d.stale), "next sweep asked for sooner")
		})
	}

	// a run closed before the sweep began needs no result read
	s := &recordingStarter{latest: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		CloseTime: timestamppb.New(sweep.Add(-time.Minute))}}
	d, _ := newTestDiscoverer(t, s)
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, sweep))
	require.Equal(t, 1, s.started())
	require.Zero(t, s.results)

	// a run that closed at its restart RPC a moment before the sweep began: the server was still
	// waiting out its splay when it answered
	closedAtRestart := sweep.Add(-300 * time.Millisecond)
	s = &recordingStarter{latest: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		CloseTime: timestamppb.New(closedAtRestart), Execution: &commonpb.WorkflowExecution{WorkflowId: "provision:n1", RunId: "r2"}},
		result: restarted(closedAtRestart)}
	d, m := newTestDiscoverer(t, s)
	d.now = func() time.Time { return now }
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, sweep))
	require.Zero(t, s.started(), "an echo of the restart window started a second run")
	require.Equal(t, 1, s.results)
	require.Equal(t, 1.0, testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))
}

// A sweep sighting of a run past its restart RPC (no activity pending, step helper or restart) is
// judged once that run closes, instead of being absorbed by a run that will not serve it.
func TestSightingOfAFinishingRunWaitsForItsEnd(t *testing.T) {
	now := time.Now()
	running := func(step, outcome string) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			SearchAttributes: searchAttrs(t, map[string]string{workflows.StepKey.GetName(): step, workflows.OutcomeKey.GetName(): outcome})}
	}
	closed := &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, CloseTime: timestamppb.New(now.Add(time.Second)),
		Execution: &commonpb.WorkflowExecution{RunId: "r1"}}

	// in its grace after a restart two minutes ago; closes after the third look: started then
	s := &recordingStarter{latest: running(workflows.StepHelper, workflows.OutcomeRunning), closed: closed, closeAfter: 3,
		result: &workflows.ProvisionResult{RestartedAt: now.Add(-2 * time.Minute), RestartSplay: 1}}
	d, m := newTestDiscoverer(t, s)
	d.recheck = 10 * time.Millisecond
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now))
	require.Eventually(t, func() bool { return s.started() == 1 }, 2*time.Second, 5*time.Millisecond)
	require.Zero(t, testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))

	// the same, restarted just now: a late echo of the server it restarted, dropped
	s = &recordingStarter{latest: running(workflows.StepHelper, workflows.OutcomeRunning), closed: closed, closeAfter: 2,
		result: &workflows.ProvisionResult{RestartedAt: now.Add(-time.Second), RestartSplay: 1}}
	d, m = newTestDiscoverer(t, s)
	d.recheck = 10 * time.Millisecond
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now))
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")) == 1 }, 2*time.Second, 5*time.Millisecond)
	require.Zero(t, s.started())

	// left by a provisioner that stopped with the run's last task in hand: closed only when the
	// task timed out (10 s) and the next provisioner ran it; the sighting still starts the host
	looks := int((10*time.Second + time.Second) / FinishingRecheck)
	s = &recordingStarter{latest: running(workflows.StepRestart, workflows.OutcomeRunning), closed: closed, closeAfter: looks,
		result: &workflows.ProvisionResult{RestartedAt: now.Add(-time.Minute), RestartSplay: 1}}
	d, m = newTestDiscoverer(t, s)
	d.recheck = time.Millisecond
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now))
	require.Eventually(t, func() bool { return s.started() == 1 }, 5*time.Second, 5*time.Millisecond,
		"gave up on the run before its task timed out")
	require.Zero(t, testutil.ToFloat64(m.StaleSightings.WithLabelValues("lab")))

	// open runs that will serve the sighting: nothing to do, no waiting
	for name, c := range map[string]struct {
		info    *workflowpb.WorkflowExecutionInfo
		pending int
	}{
		"an activity pending":     {running(workflows.StepHelper, workflows.OutcomeRunning), 1},
		"deferred":                {running(workflows.StepDeferred, workflows.OutcomeDeferred), 0},
		"before its helper":       {&workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}, 0},
		"between steps (old run)": {running(workflows.StepConfigure, workflows.OutcomeRunning), 0},
	} {
		s := &recordingStarter{latest: c.info, pending: c.pending}
		d, _ := newTestDiscoverer(t, s)
		require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now), name)
		// the settler is the only way to a start after Sighted returned: holding nothing, it
		// starts nothing later
		require.Zero(t, d.settle.size(), "%s: held for a later look", name)
		require.Zero(t, s.started(), name)
		require.Equal(t, 1, s.described, name)
	}
}

// A sighting Temporal cannot judge is refused, never started: started, it repeated a finished run
// on a host gone from provisioning mode once the partition healed. The refusal brings the next
// sweep forward, and for CheckTimeout the other sightings are refused without asking.
func TestSightingTemporalCannotJudgeIsRefused(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s := &recordingStarter{describeErr: serviceerror.NewUnavailable("connection refused")}
	d, m := newTestDiscoverer(t, s)
	d.now = func() time.Time { return now }
	unjudged := func() float64 {
		return testutil.ToFloat64(m.SightingsRefused.WithLabelValues("lab", metrics.RefusedUnjudged))
	}

	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now.Add(-3*time.Second)))
	require.NoError(t, d.Sighted(context.Background(), "n2", workflows.SourceEvent, now.Add(-3*time.Second)))
	require.Empty(t, s.calls, "no run started on a sighting Temporal could not judge")
	require.Equal(t, 1, s.described, "the second sighting is refused without asking")
	require.Equal(t, 2.0, unjudged())
	require.Len(t, d.gate.resweep, 1, "the refusal brings the next sweep forward")

	// Temporal answers again: the host has no run, and the next sighting starts one
	now = now.Add(CheckTimeout)
	s.describeErr = nil
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now.Add(-time.Second)))
	require.Len(t, s.calls, 1)
	require.Equal(t, 2.0, unjudged())
}

// A workflow a provisioner did not start (another type, or another task queue) under a host's
// workflow ID is no run of the host's: an open one is replaced by the host's run, a closed one
// is passed over (its result is never read), and neither absorbs the sighting.
func TestASquattedWorkflowIDDoesNotBlockTheHost(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	squat := func(status enumspb.WorkflowExecutionStatus, typ, queue string) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: status, Type: &commonpb.WorkflowType{Name: typ}, TaskQueue: queue,
			CloseTime: timestamppb.New(now.Add(-time.Second))}
	}
	running, completed := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	for name, c := range map[string]struct {
		latest   *workflowpb.WorkflowExecutionInfo
		conflict enumspb.WorkflowIdConflictPolicy
	}{
		"open, another type":        {squat(running, "Squat", "tq"), enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING},
		"open, another task queue":  {squat(running, workflows.WorkflowName, "elsewhere"), enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING},
		"closed, another type":      {squat(completed, "Squat", "tq"), enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING},
		"open, ours: absorbs, kept": {squat(running, workflows.WorkflowName, "tq"), enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED},
	} {
		t.Run(name, func(t *testing.T) {
			s := &recordingStarter{latest: c.latest, pending: 1}
			d, _ := newTestDiscoverer(t, s)
			d.now = func() time.Time { return now }
			require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, now.Add(-10*time.Second)))
			if c.conflict == enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED {
				require.Empty(t, s.calls, "a run of ours absorbs a sweep's sighting")
				return
			}
			require.Len(t, s.calls, 1)
			require.Equal(t, c.conflict, s.calls[0].WorkflowIDConflictPolicy)
			require.Zero(t, s.results, "a foreign run's result is not read")
		})
	}
}
