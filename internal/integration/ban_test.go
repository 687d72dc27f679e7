package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/common/auditlog"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/workflows"
)

// A banned host gets no identity whatever its helper says, until it is unbanned; a retired one
// drops off the identity listings; each is in the audit, whose chain verifies. Real go-choria
// servers, the file sink; the helper configures every host it is asked about.
func TestIntegrationBanUnbanAndRetire(t *testing.T) {
	t.Parallel()
	prepare, key, path := auditSink("")
	e := newEnv(t, envOptions{servers: 0, prepare: prepare})
	svc := e.provisioner("replica-a")
	ctx := context.Background()
	m, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	other, err := e.stack.Fleet.Start(1)
	require.NoError(t, err)
	e.waitProvisioned(90*time.Second, m, other)

	out, code := e.cli(nil, "ban", m.Identity, "--reason", "stolen from rack 4")
	require.Zero(t, code, out)
	out, code = e.cli(nil, "bans")
	require.Zero(t, code, out)
	require.Contains(t, out, m.Identity)
	require.Contains(t, out, "stolen from rack 4")

	// announced again (a thief's copy, or the server re-imaged): the helper says configure
	again := e.reannounce(m, 0)
	d := e.waitOutcome(again.Identity, workflows.OutcomeFailed)
	t.Logf("BANNED: %s", d.Reason)
	require.Contains(t, d.Reason, activities.ErrTypeBanned)
	require.Contains(t, d.Reason, "stolen from rack 4")
	require.False(t, devstack.Provisioned(again), "nothing signed or sent to a banned host")
	require.GreaterOrEqual(t, testutil.ToFloat64(svc.Metrics.BannedRefused.WithLabelValues("dev")), 1.0)
	desc, err := e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(again.Identity), "")
	require.NoError(t, err)
	events := e.runHistory(workflows.WorkflowID(again.Identity), desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	require.NotContains(t, scheduled(events), activities.ConfigureName, "refused at sign: configure never scheduled")

	out, code = e.cli(nil, "unban", m.Identity, "--reason", "recovered")
	require.Zero(t, code, out)
	out, code = e.cli(nil, "retry", m.Identity)
	require.Zero(t, code, out)
	e.waitProvisioned(90*time.Second, again)

	listed := func() string {
		out, code := e.cli(nil, "list", "--expiring", "400d")
		require.Zero(t, code, out)
		return out
	}
	require.Contains(t, listed(), other.Identity)
	out, code = e.cli(nil, "retire", other.Identity, "--reason", "decommissioned")
	require.Zero(t, code, out)
	after := listed()
	require.NotContains(t, after, other.Identity, "a retired host is off the identity listing")
	require.Contains(t, after, again.Identity)

	r, err := auditlog.Verify(ctx, key, auditlog.ReadFile(*path))
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	var kinds []string
	for _, en := range auditEntries(t, *path) {
		if en.Identity == m.Identity {
			kinds = append(kinds, en.Kind)
		}
	}
	require.Equal(t, []string{auditlog.KindIssued, auditlog.KindBanned, auditlog.KindUnbanned, auditlog.KindIssued}, kinds)
	out, code = e.cliCmd("audit", "--config", e.stack.ConfigFile, "--verify")
	require.Zero(t, code, out)
	require.True(t, strings.HasPrefix(out, "6 entries"), "two issuances, a ban, an unban, an issuance, a retirement: %s", out)
}
