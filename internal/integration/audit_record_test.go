package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/choria-temporal/provisioner/internal/audit"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/workflows"
)

// The identity record is the audit sink's, not the runs': real go-choria servers with 3-minute
// JWTs, renewal on (renew_before 2m), a file sink. Once provisioned, two servers' runs are
// deleted as retention deletes them, and the third server is banned. The deleted hosts are
// still listed by hosts list --expiring and are renewed before their JWTs expire, connected on
// new ones; the banned one is listed, and not renewed.
func TestIntegrationRecordOutlivesItsRunAndBansHoldRenewal(t *testing.T) {
	t.Parallel() // most of its two minutes wait for the JWTs to near their expiry
	sink, _, _ := auditSink("")
	renewalOn := withRenewal("3m", "  renew_before: 2m\n  interval: 5s\n  rate: 600\n", adminConfig)
	e := newEnv(t, envOptions{servers: 3, prepare: func(t *testing.T, s *devstack.Stack) { renewalOn(t, s); sink(t, s) }})
	e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	ctx := context.Background()
	first := map[string]*tokens.ServerClaims{}
	for _, m := range e.stack.Fleet.Members {
		_, first[m.Identity] = serverToken(t, m)
	}
	deleted, banned := e.stack.Fleet.Members[:2], e.stack.Fleet.Members[2]
	asked := time.Now()
	for _, m := range deleted {
		for _, r := range e.hostRuns(m.Identity) {
			_, err := e.client.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
				Namespace: e.cfg.Temporal.Namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: workflows.WorkflowID(m.Identity), RunId: r.RunID}})
			require.NoError(t, err, m.Identity)
		}
		require.Eventually(t, func() bool {
			d, err := e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(m.Identity), "")
			var missing *serviceerror.NotFound
			if !errors.As(err, &missing) {
				_ = d
			}
			return errors.As(err, &missing)
		}, 100*time.Second, time.Second, "%s: its runs deleted", m.Identity)
	}
	t.Logf("RECORD: the runs deleted %v after the request (Temporal deletes asynchronously)", time.Since(asked).Round(time.Second))
	out, code := e.cli(nil, "ban", banned.Identity, "--reason", "lost")
	require.Zero(t, code, out)
	// the audit names where each issuance is: the deleted hosts' in the sink only (once
	// visibility, which Temporal deletes from asynchronously too, no longer lists their runs)
	require.Eventually(t, func() bool {
		out, code := e.cliCmd("audit", "--config", e.stack.ConfigFile, "--since", "1h", "--json")
		require.Zero(t, code, out)
		where := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var rec audit.Record
			require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
			where[rec.Identity] = rec.Sink
		}
		return len(where) == 3 && where[deleted[0].Identity] == audit.SinkOnly && where[deleted[1].Identity] == audit.SinkOnly &&
			where[banned.Identity] == audit.SinkRecorded
	}, 60*time.Second, time.Second, "audit: the deleted hosts' issuances in the sink only, the banned one's in both")
	out, code = e.cli(nil, "list", "--expiring", "10m")
	require.Zero(t, code, out)
	for _, m := range e.stack.Fleet.Members {
		require.Contains(t, out, m.Identity, "listed from the record, its runs deleted or not")
	}

	e.setupRenewal()
	renewed := func(m *devstack.FleetMember) bool {
		raw, err := os.ReadFile(filepath.Join(m.Dir, "server.jwt"))
		if err != nil {
			return false
		}
		claims, err := tokens.ParseServerTokenUnverified(string(raw))
		return err == nil && claims.PublicKey != first[m.Identity].PublicKey && connectedWith(m, claims.ExpiresAt.Time)
	}
	require.Eventually(t, func() bool { return renewed(deleted[0]) && renewed(deleted[1]) }, 150*time.Second, 250*time.Millisecond,
		"the servers whose runs were deleted renewed and connected on new JWTs")
	out, code = e.cli(nil, "renewal", "pause", "--reason", "the test has seen the renewals")
	require.Equal(t, 0, code, out)
	for _, m := range deleted {
		_, now := serverToken(t, m)
		require.True(t, now.IssuedAt.Time.Before(first[m.Identity].ExpiresAt.Time), "%s: renewed before its first JWT expired", m.Identity)
	}
	require.False(t, renewed(banned), "the banned server was not renewed")
	require.Len(t, e.hostRuns(banned.Identity), 1, "no renewal run for the banned server")
}
