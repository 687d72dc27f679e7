package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/choria-temporal/provisioner/common/auditlog"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
)

// auditStreamSink turns Choria Streams on in the stack's broker, writes an audit key and points
// the provisioner's configuration at the stream sink.
func auditStreamSink(key []byte) func(t *testing.T, s *devstack.Stack) {
	return func(t *testing.T, s *devstack.Stack) {
		require.NoError(t, s.EnableStreams())
		keyFile := filepath.Join(s.Opts.Dir, "audit.key")
		require.NoError(t, os.WriteFile(keyFile, []byte(fmt.Sprintf("%x\n", key)), 0o600))
		f, err := os.OpenFile(s.ConfigFile, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = fmt.Fprintf(f, "audit:\n  sink: stream\n  key_file: %q\n  stream: %s\n", keyFile, auditlog.DefaultStream)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
}

// The audit on Choria Streams is outside the namespace's reach: real go-choria servers are
// provisioned with the sink on a stream of the site's broker; the stream holds one issuance per
// host naming its run, and the chain verifies. Every workflow of the task queue is then deleted:
// the entries are all still there. The provisioner's own credentials can neither purge the
// stream nor delete an entry of it.
func TestIntegrationAuditStreamOutlivesTheNamespace(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("\x3c", 32))
	e := newEnv(t, envOptions{servers: 2, prepare: auditStreamSink(key)})
	require.Equal(t, "stream", e.cfg.Audit.Sink)
	_, stop := e.replicaWith("replica-a", e.cfg, service.Options{Worker: true, Discovery: true})
	start := time.Now()
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	t.Logf("AUDIT stream: %d servers provisioned in %v", len(e.stack.Fleet.Members), time.Since(start).Round(10*time.Millisecond))
	stop() // nothing runs on the queue while its workflows are deleted
	ctx := context.Background()

	// the provisioner's own credentials: choria_config, in the choria account
	fw, err := service.NewFleetClientFramework(e.cfg, e.cfg.ChoriaConfig)
	require.NoError(t, err)
	conn, err := fw.NewConnector(ctx, fw.MiddlewareServers, "audit-stream-test", fw.Logger("test"))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	store, err := auditlog.OpenStream(ctx, conn.Nats(), e.cfg.Audit.Stream, e.cfg.Audit.MaxAgeDuration)
	require.NoError(t, err)

	issued := func() map[string][]auditlog.Entry {
		entries, unproven, err := auditlog.Entries(ctx, key, store)
		require.NoError(t, err)
		require.Zero(t, unproven)
		out := map[string][]auditlog.Entry{}
		for _, en := range entries {
			if en.Kind == auditlog.KindIssued {
				out[en.Identity] = append(out[en.Identity], en)
			}
		}
		return out
	}
	before := issued()
	require.Len(t, before, len(e.stack.Fleet.Members), "%v", before)
	for _, m := range e.stack.Fleet.Members {
		runs := e.runs(m.Identity, 1)[0].GetExecutions()
		require.Len(t, before[m.Identity], 1, m.Identity)
		require.Equal(t, runs[0].GetExecution().GetRunId(), before[m.Identity][0].RunID, "%s: the issuance names the run that asked for it", m.Identity)
	}
	report, err := auditlog.Verify(ctx, key, store)
	require.NoError(t, err)
	t.Logf("AUDIT stream: %d entries, last %d, problems %v", report.Entries, report.Last, report.Problems)
	require.Empty(t, report.Problems)

	// every workflow of the queue deleted, as a namespace writer (or retention) could
	query := fmt.Sprintf("TaskQueue = '%s'", e.stack.TaskQueue)
	list := func() []*workflowservice.ListWorkflowExecutionsResponse {
		resp, err := e.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: e.cfg.Temporal.Namespace, Query: query})
		require.NoError(t, err)
		return []*workflowservice.ListWorkflowExecutionsResponse{resp}
	}
	deleted := 0
	for _, ex := range list()[0].GetExecutions() {
		_, err := e.client.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
			Namespace: e.cfg.Temporal.Namespace, WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: ex.GetExecution().GetWorkflowId(), RunId: ex.GetExecution().GetRunId()}})
		require.NoError(t, err)
		deleted++
	}
	require.GreaterOrEqual(t, deleted, len(e.stack.Fleet.Members))
	require.Eventually(t, func() bool { return len(list()[0].GetExecutions()) == 0 }, 100*time.Second, time.Second, "the queue's workflows deleted")
	after := issued()
	require.Equal(t, before, after, "the issuances outlive their runs")
	again, err := auditlog.Verify(ctx, key, store)
	require.NoError(t, err)
	require.Empty(t, again.Problems)
	require.Equal(t, report.Entries, again.Entries)

	// the JetStream API, with the provisioner's credentials: no purge, no delete
	js, err := jetstream.New(conn.Nats())
	require.NoError(t, err)
	stream, err := js.Stream(ctx, e.cfg.Audit.Stream)
	require.NoError(t, err)
	// refused by the broker's permissions (Streams user: the request is dropped, unanswered) or,
	// for what those permit, by the stream's own deny_delete
	refused := func(what string, op func(context.Context) error) error {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := op(octx)
		t.Logf("AUDIT stream: %s: %v", what, err)
		require.Error(t, err, what)
		return err
	}
	refused("purge", func(ctx context.Context) error { return stream.Purge(ctx) })
	require.ErrorContains(t, refused("delete entry 1", func(ctx context.Context) error { return stream.DeleteMsg(ctx, 1) }), "message delete not permitted")
	refused("delete the stream", func(ctx context.Context) error { return js.DeleteStream(ctx, e.cfg.Audit.Stream) })
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(report.Entries), info.State.Msgs, "every entry still there")
	require.True(t, info.Config.DenyDelete && info.Config.DenyPurge)

	// the operator's verification reads the stream as the workers do
	out, code := e.cliCmd("audit", "--config", e.stack.ConfigFile, "--verify")
	require.Zero(t, code, out)
	require.Contains(t, out, fmt.Sprintf("%d entries", report.Entries))
}
