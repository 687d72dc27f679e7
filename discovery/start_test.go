package discovery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

func TestEventBecomesSignalWithStart(t *testing.T) {
	s := &recordingStarter{}
	d, m := newTestDiscoverer(t, s)
	d.HandleEvent(context.Background(), startupEvent(t, "n1.example", "provision_mode_server"))
	d.HandleEvent(context.Background(), []byte("garbage"))
	require.Len(t, s.calls, 1)
	require.Equal(t, workflows.WorkflowID("n1.example"), s.calls[0].ID)
	require.Equal(t, "tq", s.calls[0].TaskQueue)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, s.calls[0].WorkflowIDReusePolicy)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING, s.calls[0].WorkflowIDConflictPolicy, "an open run is left alone")
	require.Equal(t, "n1.example", s.args[0].Identity)
	require.Equal(t, workflows.SourceEvent, s.args[0].Source)
	require.Equal(t, hostruns.Summary("n1.example", "lab", workflows.SourceEvent), s.calls[0].StaticSummary)
	require.Equal(t, 1.0, testutil.ToFloat64(m.EventDiscovered.WithLabelValues("lab")))
}

// Only a startup event that arrived alone starts eagerly in this process; one with events
// queued behind it, and a sweep's sightings, start through the task queue.
func TestEagerStartOnlyForALoneEvent(t *testing.T) {
	s := &recordingStarter{}
	d, _ := newTestDiscoverer(t, s)
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceEvent, time.Now()))
	d.queued.Store(3)
	require.NoError(t, d.Sighted(context.Background(), "n2", workflows.SourceEvent, time.Now()))
	d.queued.Store(0)
	require.NoError(t, d.Sighted(context.Background(), "n3", workflows.SourceDiscovery, time.Now()))
	require.Len(t, s.calls, 3)
	require.True(t, s.calls[0].EnableEagerStart)
	require.False(t, s.calls[1].EnableEagerStart, "events were waiting")
	require.False(t, s.calls[2].EnableEagerStart, "a sweep")
}

// A fast-mode run gets a workflow task timeout its one task of local activities can keep under
// load; a regular run keeps Temporal's default.
func TestFastModeRunsGetALongerTaskTimeout(t *testing.T) {
	s := &recordingStarter{}
	d, _ := newTestDiscoverer(t, s)
	require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceEvent, time.Now()))
	d.opts.Start.Fast = true
	require.NoError(t, d.Sighted(context.Background(), "n2", workflows.SourceEvent, time.Now()))
	require.Len(t, s.calls, 2)
	require.Zero(t, s.calls[0].WorkflowTaskTimeout)
	require.Equal(t, hostruns.FastModeTaskTimeout, s.calls[1].WorkflowTaskTimeout)
}

func TestStartFailureIsReturned(t *testing.T) {
	s := &recordingStarter{err: errors.New("temporal unavailable")}
	d, _ := newTestDiscoverer(t, s)
	require.ErrorContains(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, time.Now()), "temporal unavailable")
}
