package renewal

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// OutcomeRunFailed is a failed host's outcome when its renewal reached it, but the provisioning
// run started for it failed.
const OutcomeRunFailed = "run-failed"

// FailedHost is a host whose renewal failed and that has not been provisioned since.
type FailedHost struct {
	Identity string    `json:"identity"`
	Outcome  string    `json:"outcome"` // unreachable, refused, deferred or run-failed
	Reason   string    `json:"reason,omitempty"`
	Expires  time.Time `json:"expires,omitzero"` // the identity it still holds (zero: unknown)
	Expired  bool      `json:"expired,omitempty"`
	At       time.Time `json:"at"`
	// the run that says so: the renewal run, or the failed provisioning run
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
}

// Failed lists the hosts whose renewal failed: those of the latest completed renewal run's
// Result.Failed whose latest run has not completed provisioned since, and those whose latest run
// is one a renewal started (source renewal) that failed. Its cost: a page of renewal runs, one
// result, the failed renewal-started runs and one IN query per hostruns.IDsPerQuery hosts.
func Failed(ctx context.Context, c client.Client, taskQueue string) ([]FailedHost, error) {
	latest, err := LatestResult(ctx, c, taskQueue)
	if err != nil {
		return nil, err
	}
	query := fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s' AND %s = '%s' AND (ExecutionStatus = 'Failed' OR "+
		"ExecutionStatus = 'Terminated' OR ExecutionStatus = 'TimedOut' OR ExecutionStatus = 'Canceled')",
		workflows.WorkflowName, taskQueue, workflows.SourceKey.GetName(), workflows.SourceRenewal)
	var runs []hostruns.Run
	if err := hostruns.Each(ctx, c, query, func(r hostruns.Run) bool { runs = append(runs, r); return true }); err != nil {
		return nil, err
	}
	var ids []string
	if latest != nil {
		for _, f := range latest.Result.Failed {
			ids = append(ids, workflows.WorkflowID(f.Identity))
		}
	}
	for _, r := range runs {
		ids = append(ids, r.WorkflowID)
	}
	hosts, err := hostruns.LatestOf(ctx, c, ids)
	if err != nil {
		return nil, err
	}
	return failedHosts(latest, runs, hosts), nil
}

// failedHosts merges the latest renewal run's failures and the failed renewal-started runs with
// what each host's latest run is now, one line a host.
func failedHosts(latest *LatestRun, runs []hostruns.Run, hosts map[string]hostruns.Latest) []FailedHost {
	var out []FailedHost
	seen := map[string]bool{}
	if latest != nil {
		for _, f := range latest.Result.Failed {
			if l, ok := hosts[workflows.WorkflowID(f.Identity)]; ok && provisionedSince(l.Run, f.At) || seen[f.Identity] {
				continue
			}
			seen[f.Identity] = true
			out = append(out, FailedHost{Identity: f.Identity, Outcome: f.Outcome, Reason: f.Reason, Expires: f.Expires, Expired: f.Expired,
				At: f.At, WorkflowID: latest.WorkflowID, RunID: latest.RunID})
		}
	}
	for _, r := range runs {
		l, ok := hosts[r.WorkflowID]
		id, _ := workflows.IdentityFromWorkflowID(r.WorkflowID)
		if !ok || l.Run.RunID != r.RunID || seen[id] {
			continue // provisioned again since, or being provisioned
		}
		seen[id] = true
		out = append(out, FailedHost{Identity: id, Outcome: OutcomeRunFailed, At: r.Closed, WorkflowID: r.WorkflowID, RunID: r.RunID,
			Reason: fmt.Sprintf("the provisioning run its renewal started ended %s (hosts show %s has the reason)", strings.ToLower(r.StatusName()), id)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	return out
}

// provisionedSince says whether a host's latest run completed provisioned after a renewal failed.
func provisionedSince(r hostruns.Run, at time.Time) bool {
	return r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED && r.Outcome == workflows.OutcomeProvisioned && r.Started.After(at)
}
