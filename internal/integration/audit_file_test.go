package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// auditSink writes an audit key into the stack's directory and points the provisioner's
// configuration at a file sink; it returns the key and the sink's path.
func auditSink(file string) (prepare func(t *testing.T, s *devstack.Stack), key []byte, path *string) {
	key = []byte(strings.Repeat("\x5a", 32))
	path = new(string)
	return func(t *testing.T, s *devstack.Stack) {
		keyFile := filepath.Join(s.Opts.Dir, "audit.key")
		require.NoError(t, os.WriteFile(keyFile, []byte(fmt.Sprintf("%x\n", key)), 0o600))
		*path = file
		if *path == "" {
			*path = filepath.Join(s.Opts.Dir, "audit.jsonl")
		}
		f, err := os.OpenFile(s.ConfigFile, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = fmt.Fprintf(f, "audit:\n  sink: file\n  file: %q\n  key_file: %q\n", *path, keyFile)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}, key, path
}

// auditEntries reads the sink's entries.
func auditEntries(t *testing.T, path string) []auditlog.Entry {
	t.Helper()
	var out []auditlog.Entry
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var e auditlog.Entry
		require.NoError(t, json.Unmarshal([]byte(line), &e))
		out = append(out, e)
	}
	return out
}

func issuedTo(entries []auditlog.Entry, identity string) *auditlog.Entry {
	for i, e := range entries {
		if e.Kind == auditlog.KindIssued && e.Identity == identity {
			return &entries[i]
		}
	}
	return nil
}

// Every issuance is in the audit before the configure RPC sends it. Real go-choria servers; the
// second server's configure request is held on its way to the broker: its issuance is already
// in the file while the server holds no configuration. Each entry names the host, its run, the
// signer, the key it was issued for and its expiry; the chain verifies.
func TestIntegrationAuditFileHoldsEachIssuanceBeforeItIsSent(t *testing.T) {
	t.Parallel()
	prepare, key, path := auditSink("")
	e := newEnv(t, envOptions{servers: 0, helper: switchableHelper(t), faults: true, prepare: prepare})
	e.provisioner("replica-a")
	ctx := context.Background()

	first, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	e.waitProvisioned(90*time.Second, first)
	desc, err := e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(first.Identity), "")
	require.NoError(t, err)
	got := issuedTo(auditEntries(t, *path), first.Identity)
	require.NotNil(t, got, "the first host's issuance")
	require.Equal(t, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), got.RunID)
	require.Equal(t, workflows.WorkflowID(first.Identity), got.Workflow)
	require.NotEmpty(t, got.Signer)
	require.True(t, strings.HasPrefix(got.Subject, "sha256:"), got.Subject)
	require.WithinDuration(t, time.Now().AddDate(1, 0, 0), got.Expires, 48*time.Hour, "server_jwt_validity: 365d")

	e.setFlag("helper-slow", true)
	second, err := e.stack.Fleet.Start(1)
	require.NoError(t, err)
	e.inFlight(second.Identity, activities.RunHelperName, 60*time.Second)
	release := e.holdRequests()
	e.inFlight(second.Identity, activities.ConfigureName, 60*time.Second)
	require.Eventually(t, func() bool { return issuedTo(auditEntries(t, *path), second.Identity) != nil }, 30*time.Second, 50*time.Millisecond,
		"the issuance is audited while configure's request is held")
	require.False(t, devstack.Provisioned(second), "audited before the configuration reached the server")
	release()
	e.setFlag("helper-slow", false)
	e.waitProvisioned(90*time.Second, second)

	r, err := auditlog.Verify(ctx, key, auditlog.ReadFile(*path))
	require.NoError(t, err)
	t.Logf("AUDIT file: %d entries, last %d, problems %v", r.Entries, r.Last, r.Problems)
	require.Empty(t, r.Problems)
	require.GreaterOrEqual(t, r.Entries, 2)
}

// With the sink unwritable (its file on a full device) no identity is signed or sent: the host's
// sign step fails AuditUnavailable after its retries (the sink cannot be read for bans either),
// the reason is on its run, the failures are counted, and the server stays in provisioning mode.
func TestIntegrationAuditUnwritableSendsNothing(t *testing.T) {
	t.Parallel()
	prepare, _, _ := auditSink("/dev/full")
	e := newEnv(t, envOptions{servers: 0, prepare: prepare})
	svc := e.provisioner("replica-a")
	m, err := e.stack.Fleet.Start(0)
	require.NoError(t, err)
	h := e.waitOutcome(m.Identity, workflows.OutcomeFailed)
	t.Logf("AUDIT unwritable: %s", h.Reason)
	// refused at sign already: the sink that cannot be written cannot be read for bans either
	require.Contains(t, h.Reason, "step sign")
	require.Contains(t, h.Reason, activities.ErrTypeAudit)
	require.Contains(t, h.Reason, "nothing is signed or sent")
	require.False(t, devstack.Provisioned(m), "nothing reached the server")
	require.GreaterOrEqual(t, testutil.ToFloat64(svc.Metrics.AuditFailures.WithLabelValues("dev")), 2.0, "each attempt counted")
}
