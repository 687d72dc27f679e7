package hostruns

import (
	"context"
	"sort"
)

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
