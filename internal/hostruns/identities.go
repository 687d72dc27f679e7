package hostruns

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/choria-temporal/provisioner/workflows"
)

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

// Current lists the identities hosts hold now among the runs query selects (an IssuedQuery):
// each run that is its host's latest, soonest expiry first. A host provisioned again since (or
// being provisioned) holds another identity, or none yet, and is left out. Its cost is the
// query's pages and one IN query per IDsPerQuery hosts it found, never a scan of the fleet.
func Current(ctx context.Context, l Lister, query string) ([]Run, error) {
	var found []Run
	if err := Each(ctx, l, query, func(r Run) bool { found = append(found, r); return true }); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(found))
	seen := map[string]bool{}
	for _, r := range found {
		if !seen[r.WorkflowID] {
			seen[r.WorkflowID] = true
			ids = append(ids, r.WorkflowID)
		}
	}
	latest, err := LatestOf(ctx, l, ids)
	if err != nil {
		return nil, err
	}
	current := found[:0]
	for _, r := range found {
		if l, ok := latest[r.WorkflowID]; ok && l.Run.RunID == r.RunID {
			current = append(current, r)
		}
	}
	sort.Slice(current, func(i, j int) bool { return current[i].Expires.Before(current[j].Expires) })
	return current, nil
}
