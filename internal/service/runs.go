package service

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// RunHistory reads a host's earlier runs from Temporal's visibility store. It is asked only when a
// run's first RPC got no reply, so it adds no visibility load to a healthy fleet.
type RunHistory struct {
	Client client.Client
}

// CompletedAfter finds a run of workflowID, other than excludeRunID, that completed after t.
func (r RunHistory) CompletedAfter(ctx context.Context, workflowID, excludeRunID string, after time.Time) (time.Time, bool, error) {
	q, err := hostruns.CompletedAfterQuery(workflowID, after)
	if err != nil {
		return time.Time{}, false, err
	}
	resp, err := r.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: 10})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("listing runs of %s: %w", workflowID, err)
	}
	for _, e := range resp.GetExecutions() {
		if e.GetExecution().GetRunId() != excludeRunID {
			return e.GetCloseTime().AsTime(), true, nil
		}
	}
	return time.Time{}, false, nil
}
