package hostruns

import (
	"fmt"
	"strings"
	"time"

	"github.com/choria-temporal/provisioner/workflows"
)

// HostsQuery selects hosts' runs in Temporal's visibility store; empty fields match every run.
// Its String is also what `temporal workflow list --query` takes.
type HostsQuery struct {
	TaskQueue string
	Outcome   string // ProvisionOutcome
	Step      string // ProvisionStep
	Site      string // ProvisionSite
	Running   bool   // open runs only
}

func (q HostsQuery) String() string {
	parts := []string{fmt.Sprintf("WorkflowType = '%s'", workflows.WorkflowName)}
	add := func(field, value string) {
		if value != "" {
			parts = append(parts, fmt.Sprintf("%s = '%s'", field, unquote(value)))
		}
	}
	add("TaskQueue", q.TaskQueue)
	add(workflows.OutcomeKey.GetName(), q.Outcome)
	add(workflows.StepKey.GetName(), q.Step)
	add(workflows.SiteKey.GetName(), q.Site)
	if q.Running {
		parts = append(parts, "ExecutionStatus = 'Running'")
	}
	return strings.Join(parts, " AND ")
}

// CompletedAfterQuery selects the completed runs of one host's workflow that closed after t.
func CompletedAfterQuery(workflowID string, after time.Time) (string, error) {
	if strings.ContainsAny(workflowID, `'"\`) {
		return "", fmt.Errorf("workflow ID %q cannot be quoted in a visibility query", workflowID)
	}
	return fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'Completed' AND CloseTime > '%s'",
		workflowID, after.UTC().Format(time.RFC3339Nano)), nil
}

// IssuedQuery selects the provisioned runs of taskQueue's site that issued an identity, with
// cond (a visibility condition on the identity's attributes, "" for all) added. Superseded runs
// match too: Current keeps each host's latest.
func IssuedQuery(taskQueue, site, cond string) (string, error) {
	if !Quotable(taskQueue) || (site != "" && !Quotable(site)) {
		return "", fmt.Errorf("task queue %q or site %q cannot be quoted in a visibility query", taskQueue, site)
	}
	q := fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s' AND ExecutionStatus = 'Completed' AND %s = '%s' AND %s IS NOT NULL",
		workflows.WorkflowName, taskQueue, workflows.OutcomeKey.GetName(), workflows.OutcomeProvisioned, workflows.ExpiresKey.GetName())
	if site != "" {
		q += fmt.Sprintf(" AND %s = '%s'", workflows.SiteKey.GetName(), site)
	}
	if cond != "" {
		q += " AND " + cond
	}
	return q, nil
}

// ExpiresBefore is the condition on identities that expire before t (those expired included).
func ExpiresBefore(t time.Time) string {
	return fmt.Sprintf("%s < '%s'", workflows.ExpiresKey.GetName(), t.UTC().Format(time.RFC3339Nano))
}

// IssuedBetween is the condition on identities issued in [since, until) (until zero: no end).
func IssuedBetween(since, until time.Time) string {
	c := fmt.Sprintf("%s >= '%s'", workflows.IssuedKey.GetName(), since.UTC().Format(time.RFC3339Nano))
	if !until.IsZero() {
		c += fmt.Sprintf(" AND %s < '%s'", workflows.IssuedKey.GetName(), until.UTC().Format(time.RFC3339Nano))
	}
	return c
}

// IDsQuery selects every run of the workflow IDs.
func IDsQuery(ids []string) (string, error) {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		if !Quotable(id) {
			return "", fmt.Errorf("workflow ID %q cannot be quoted in a visibility query", id)
		}
		quoted[i] = "'" + id + "'"
	}
	return "WorkflowId IN (" + strings.Join(quoted, ", ") + ")", nil
}

// Quotable says whether a workflow ID can be put in a visibility query's quotes as it is.
func Quotable(id string) bool { return id != "" && !strings.ContainsAny(id, `'"\`) }

// unquote keeps a value from closing its quotes in a visibility query.
func unquote(s string) string { return strings.ReplaceAll(s, "'", "") }
