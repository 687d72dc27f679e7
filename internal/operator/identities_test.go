package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// withIdentity gives a run the identity attributes a provisioned run upserts.
func withIdentity(t *testing.T, i *workflowpb.WorkflowExecutionInfo, issued, expires time.Time) *workflowpb.WorkflowExecutionInfo {
	dc := converter.GetDefaultDataConverter()
	for name, v := range map[string]any{workflows.IssuedKey.GetName(): issued, workflows.ExpiresKey.GetName(): expires,
		workflows.SignerKey.GetName(): "ed25519:abcd"} {
		p, err := dc.ToPayload(v)
		require.NoError(t, err)
		i.SearchAttributes.IndexedFields[name] = p
	}
	return i
}

// The identities expiring are the ones hosts hold now: a host provisioned again since is
// listed with its newest identity only, or not at all; expired ones are listed and marked.
func TestExpiringListsTheCurrentIdentitiesSoonestFirst(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	runs := fleet(t, "a:completed", "b:completed", "a:completed", "c:completed", "d:running")
	withIdentity(t, runs[0], now.Add(-time.Minute), now.Add(2*time.Minute))   // a, newest
	withIdentity(t, runs[1], now.Add(-time.Hour), now.Add(-time.Minute))      // b, expired
	withIdentity(t, runs[2], now.Add(-2*time.Hour), now.Add(-30*time.Minute)) // a, superseded
	withIdentity(t, runs[3], now.Add(-2*time.Hour), now.Add(40*24*time.Hour)) // c, later than asked
	fv := &fakeVisibility{runs: runs, candidate: func(i *workflowpb.WorkflowExecutionInfo) bool {
		// what the query selects of the fake's store: expiring within 30 days
		exp := i.GetSearchAttributes().GetIndexedFields()[workflows.ExpiresKey.GetName()]
		var t time.Time
		return exp != nil && converter.GetDefaultDataConverter().FromPayload(exp, &t) == nil && t.Before(now.Add(30*24*time.Hour))
	}}
	op := &Operator{C: fv, TaskQueue: "tq", Starter: hostruns.Starter{Site: "dc1"}, Now: func() time.Time { return now }}
	hosts, err := op.Expiring(context.Background(), ExpiringFilter{Within: 30 * 24 * time.Hour})
	require.NoError(t, err)
	query := fv.queries[0]
	require.Contains(t, query, "ProvisionSite = 'dc1'", "the configuration's site")
	require.Contains(t, query, "IdentityExpires < '2026-12-31T12:00:00Z'")
	require.Len(t, hosts, 2)
	require.Equal(t, "b", hosts[0].Identity)
	require.True(t, hosts[0].Expired)
	require.Equal(t, "a", hosts[1].Identity)
	require.Equal(t, "run-0", hosts[1].RunID)
	require.False(t, hosts[1].Expired)
	require.Equal(t, now.Add(2*time.Minute), hosts[1].IdentityExpires)
	require.Equal(t, "ed25519:abcd", hosts[1].IdentitySigner)

	hosts, err = op.Expiring(context.Background(), ExpiringFilter{Within: 30 * 24 * time.Hour, Limit: 1, Site: "dc2"})
	require.NoError(t, err)
	require.Len(t, hosts, 1)
	require.True(t, strings.Contains(fv.queries[len(fv.queries)-2], "ProvisionSite = 'dc2'"), fv.queries)

	_, err = op.Expiring(context.Background(), ExpiringFilter{})
	require.ErrorIs(t, err, ErrBadFilter)
	_, err = op.Expiring(context.Background(), ExpiringFilter{Within: time.Hour, Site: "it's"})
	require.ErrorIs(t, err, ErrBadFilter)
}
