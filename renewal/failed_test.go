package renewal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// A failed renewal is listed until the host is provisioned again; a renewal-started run that
// failed is listed while it is the host's latest.
func TestFailedHosts(t *testing.T) {
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	latest := &LatestRun{WorkflowID: "renewal-run:q-1", RunID: "rr", Result: Result{Failed: []HostRenewal{
		{Identity: "silent.example", Outcome: OutcomeUnreachable, Reason: "no reply", At: at, Expired: true},
		{Identity: "fixed.example", Outcome: OutcomeUnreachable, At: at},
		{Identity: "retrying.example", Outcome: OutcomeRefused, At: at},
	}}}
	completed, failed, running := enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	run := func(id, runID string, st enumspb.WorkflowExecutionStatus, outcome string, started time.Time) hostruns.Latest {
		return hostruns.Latest{Run: hostruns.Run{WorkflowID: workflows.WorkflowID(id), RunID: runID, Status: st, Outcome: outcome, Started: started, Closed: started.Add(time.Minute)}}
	}
	hosts := map[string]hostruns.Latest{
		workflows.WorkflowID("silent.example"):   run("silent.example", "old", completed, workflows.OutcomeProvisioned, at.Add(-time.Hour)),
		workflows.WorkflowID("fixed.example"):    run("fixed.example", "new", completed, workflows.OutcomeProvisioned, at.Add(time.Hour)),
		workflows.WorkflowID("retrying.example"): run("retrying.example", "open", running, workflows.OutcomeRunning, at.Add(time.Hour)),
		workflows.WorkflowID("broken.example"):   run("broken.example", "bad", failed, workflows.OutcomeFailed, at),
		workflows.WorkflowID("healed.example"):   run("healed.example", "good", completed, workflows.OutcomeProvisioned, at.Add(2*time.Hour)),
	}
	runs := []hostruns.Run{hosts[workflows.WorkflowID("broken.example")].Run,
		{WorkflowID: workflows.WorkflowID("healed.example"), RunID: "bad-before", Status: failed}}
	got := failedHosts(latest, runs, hosts)
	var ids []string
	for _, h := range got {
		ids = append(ids, h.Identity+":"+h.Outcome)
	}
	require.Equal(t, []string{"broken.example:run-failed", "retrying.example:refused", "silent.example:unreachable"}, ids)
	require.True(t, got[2].Expired)
	require.Equal(t, "renewal-run:q-1", got[2].WorkflowID)
	require.Equal(t, "bad", got[0].RunID)
	require.Contains(t, got[0].Reason, "ended failed")
	require.Empty(t, failedHosts(nil, nil, nil))
}
