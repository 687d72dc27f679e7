package discovery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/choria-temporal/provisioner/workflows"
)

// A sweep judges the sightings of hosts at work by one listing of the open runs instead of a
// describe each; a run that may be finishing is still described, and a failed listing leaves
// every sighting to a describe of its own.
func TestSweepJudgesHostsAtWorkByOneListing(t *testing.T) {
	run := func(identity string, status enumspb.WorkflowExecutionStatus, attrs map[string]string) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: status, SearchAttributes: searchAttrs(t, attrs),
			Type: &commonpb.WorkflowType{Name: workflows.WorkflowName}, TaskQueue: "tq",
			Execution: &commonpb.WorkflowExecution{WorkflowId: workflows.WorkflowID(identity), RunId: "r-" + identity}}
	}
	step, outcome := workflows.StepKey.GetName(), workflows.OutcomeKey.GetName()
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	var open []*workflowpb.WorkflowExecutionInfo
	for i := range 2500 { // three pages
		open = append(open, run(fmt.Sprintf("queued%d", i), running, map[string]string{outcome: workflows.OutcomeRunning}))
	}
	open = append(open,
		run("reading", running, map[string]string{step: workflows.StepInventory}),
		run("deferred", running, map[string]string{step: workflows.StepDeferred, outcome: workflows.OutcomeDeferred}),
		run("helper", running, map[string]string{step: workflows.StepHelper}),
		run("restart", running, map[string]string{step: workflows.StepRestart}),
		run("closed", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, nil))

	s := &recordingStarter{open: open}
	ids, err := AbsorbingRuns(context.Background(), s, "tq")
	require.NoError(t, err)
	require.Len(t, s.lists, 3)
	require.Equal(t, "WorkflowType = 'ProvisionHost' AND TaskQueue = 'tq' AND ExecutionStatus = 'Running'", s.lists[0].Query)
	require.Len(t, ids, 2502)
	for _, id := range []string{"queued0", "queued2499", "reading", "deferred"} {
		require.Contains(t, ids, workflows.WorkflowID(id))
	}
	for _, id := range []string{"helper", "restart", "closed"} {
		require.NotContains(t, ids, workflows.WorkflowID(id), "may be finishing, or not open: described")
	}

	// the handover: a host at work is absorbed without a describe; one at its helper is
	// described (running, an activity pending: absorbed by that run); one unknown is started
	s = &recordingStarter{open: open, pending: 1}
	d, _ := newTestDiscoverer(t, s)
	o := d.listOpen(context.Background())
	sweptAt := time.Now()
	deadline := sweptAt.Add(time.Minute)
	for _, c := range []struct {
		identity          string
		latest            *workflowpb.WorkflowExecutionInfo // what a describe says
		result            handoverResult
		described, starts int
	}{
		{"queued7", nil, resultAbsorbed, 0, 0},
		{"deferred", nil, resultAbsorbed, 0, 0},
		{"helper", open[len(open)-3], resultJudged, 1, 0},
		{"new-host", nil, resultHanded, 2, 1},
	} {
		s.mu.Lock()
		s.latest = c.latest
		s.mu.Unlock()
		require.Equal(t, c.result, d.handOver(context.Background(), c.identity, sweptAt, deadline, o), c.identity)
		require.Equal(t, c.described, s.described, c.identity)
		require.Equal(t, c.starts, s.started(), c.identity)
	}

	// the listing fails: every sighting is described, as before
	s = &recordingStarter{open: open, listErr: serviceerror.NewUnavailable("visibility store down")}
	_, err = AbsorbingRuns(context.Background(), s, "tq")
	require.ErrorContains(t, err, "visibility store down")
	d, _ = newTestDiscoverer(t, s)
	o = d.listOpen(context.Background())
	require.Equal(t, resultHanded, d.handOver(context.Background(), "queued7", sweptAt, deadline, o))
	require.Equal(t, 1, s.described)
}
