package hostruns

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/choria-temporal/provisioner/workflows"
)

// expiring answers the IssuedQuery with issued, and IN queries from every run (byIDs).
type expiring struct {
	byIDs
	issued []*workflowpb.WorkflowExecutionInfo
}

func (e *expiring) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	if strings.HasPrefix(req.Query, "WorkflowId IN") {
		return e.byIDs.ListWorkflow(ctx, req)
	}
	e.queries = append(e.queries, req.Query)
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: e.issued}, nil
}

func withExpiry(t *testing.T, r *workflowpb.WorkflowExecutionInfo, exp time.Time) *workflowpb.WorkflowExecutionInfo {
	p, err := converter.GetDefaultDataConverter().ToPayload(exp)
	require.NoError(t, err)
	r.SearchAttributes = &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{workflows.ExpiresKey.GetName(): p}}
	return r
}

// A host provisioned again holds its newest identity: the older run's, though it matches the
// query, is superseded; one being provisioned holds none yet. The soonest expiry comes first.
func TestCurrentKeepsEachHostsLatestRun(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tq := "tq"
	a1 := withExpiry(t, info("provision:a", "a1", t0, workflows.WorkflowName, tq), t0.Add(48*time.Hour))
	a2 := info("provision:a", "a2", t0.Add(time.Hour), workflows.WorkflowName, tq) // renewed: expires later, not in the query's answer
	b1 := withExpiry(t, info("provision:b", "b1", t0, workflows.WorkflowName, tq), t0.Add(24*time.Hour))
	c1 := withExpiry(t, info("provision:c", "c1", t0, workflows.WorkflowName, tq), t0.Add(72*time.Hour))
	c2 := info("provision:c", "c2", t0.Add(time.Hour), workflows.WorkflowName, tq) // being provisioned
	d1 := withExpiry(t, info("provision:d", "d1", t0, workflows.WorkflowName, tq), t0.Add(36*time.Hour))
	l := &expiring{byIDs: byIDs{runs: []*workflowpb.WorkflowExecutionInfo{a1, a2, b1, c1, c2, d1}}, issued: []*workflowpb.WorkflowExecutionInfo{a1, b1, c1, d1}}

	q, err := IssuedQuery(tq, "dc1", ExpiresBefore(t0.Add(30*24*time.Hour)))
	require.NoError(t, err)
	require.Contains(t, q, "IdentityExpires < '2026-12-31T00:00:00Z'")
	require.Contains(t, q, "ProvisionSite = 'dc1'")
	current, err := Current(context.Background(), l, q)
	require.NoError(t, err)
	var got []string
	for _, r := range current {
		got = append(got, r.RunID)
	}
	require.Equal(t, []string{"b1", "d1"}, got)
	require.Equal(t, t0.Add(24*time.Hour), current[0].Expires)

	_, err = IssuedQuery("tq'", "", "")
	require.ErrorContains(t, err, "cannot be quoted")
}
