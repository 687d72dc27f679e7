package discovery

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/choria-temporal/provisioner/internal/metrics"
	"github.com/choria-temporal/provisioner/workflows"
)

// fleetStarter is a Temporal whose every host's latest run is finishing until closed is set,
// then closed long ago (a sighting of it starts a new run); it counts describes and starts by host.
type fleetStarter struct {
	recordingStarter
	finishing *workflowpb.WorkflowExecutionInfo
	mu        sync.Mutex
	closed    bool
	describes map[string]int
	starts    map[string]int
}

func newFleetStarter(t *testing.T) *fleetStarter {
	return &fleetStarter{describes: map[string]int{}, starts: map[string]int{},
		finishing: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			SearchAttributes: searchAttrs(t, map[string]string{workflows.StepKey.GetName(): workflows.StepRestart})}}
}

func (f *fleetStarter) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.describes[id]++
	info := f.finishing
	if f.closed {
		info = &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
			CloseTime: timestamppb.New(time.Now().Add(-time.Hour)), Execution: &commonpb.WorkflowExecution{RunId: "r1"}}
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: ours(info)}, nil
}

func (f *fleetStarter) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts[o.ID]++
	return nil, nil
}

func (f *fleetStarter) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

func (f *fleetStarter) counts(id string) (describes, starts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.describes[workflows.WorkflowID(id)], f.starts[workflows.WorkflowID(id)]
}

// A host sighted again and again while its run is finishing is held once: one look per recheck,
// not one per sighting, and one start when the run has closed.
func TestSettleHoldsAHostOnce(t *testing.T) {
	f := newFleetStarter(t)
	d, _ := newTestDiscovererWith(t, f, nil, zap.NewNop())
	d.recheck = 20 * time.Millisecond
	for range 50 {
		require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, time.Now()))
	}
	require.Equal(t, 1, d.settle.size())
	time.Sleep(5 * d.recheck)
	describes, starts := f.counts("n1")
	require.Less(t, describes, 50+20, "the 50 sightings' own describes and a few looks at most")
	require.Zero(t, starts)
	f.close()
	require.Eventually(t, func() bool { _, s := f.counts("n1"); return s == 1 }, 2*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return d.settle.size() == 0 }, time.Second, 5*time.Millisecond)
	time.Sleep(3 * d.recheck)
	_, starts = f.counts("n1")
	require.Equal(t, 1, starts, "the sightings held once start once")
}

// The settler holds at most its size; a sighting beyond it is refused and counted (the next
// sweep finds the host), and however many hosts it holds, it runs one goroutine.
func TestSettleIsBounded(t *testing.T) {
	f := newFleetStarter(t)
	d, m := newTestDiscovererWith(t, f, nil, zap.NewNop())
	d.recheck = 10 * time.Millisecond
	d.settle = newSettler(300)
	before := runtime.NumGoroutine()
	for i := range 400 {
		require.NoError(t, d.Sighted(context.Background(), fmt.Sprintf("n%d", i), workflows.SourceDiscovery, time.Now()))
	}
	require.Equal(t, 300, d.settle.size())
	require.Equal(t, 100.0, refused(m, metrics.RefusedFull))
	require.LessOrEqual(t, runtime.NumGoroutine(), before+2, "a goroutine per held sighting")

	f.close()
	require.Eventually(t, func() bool { return d.settle.size() == 0 }, 5*time.Second, 10*time.Millisecond)
	// the goroutine ends when nothing is held
	for deadline := time.Now().Add(time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "the settler's goroutine outlived what it held")
	_, starts := f.counts("n0")
	require.Equal(t, 1, starts)
	_, starts = f.counts("n399")
	require.Zero(t, starts, "refused, not held")
}

// A held sighting whose context ends is let go without a start.
func TestSettleLetsGoWhenItsContextEnds(t *testing.T) {
	f := newFleetStarter(t)
	d, _ := newTestDiscovererWith(t, f, nil, zap.NewNop())
	d.recheck = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, d.Sighted(ctx, "n1", workflows.SourceEvent, time.Now().Add(-time.Minute)))
	require.Equal(t, 1, d.settle.size())
	cancel()
	require.Eventually(t, func() bool { return d.settle.size() == 0 }, time.Second, 5*time.Millisecond)
	_, starts := f.counts("n1")
	require.Zero(t, starts)
}

// Held again, a sighting keeps the later time (the host answered then) and an event's handling.
func TestSettleDedupeKeepsTheLaterSighting(t *testing.T) {
	st := newSettler(10)
	at := time.Now()
	start, ok := st.add(context.Background(), sighting{identity: "n1", source: workflows.SourceDiscovery, at: at}, 3)
	require.True(t, start)
	require.True(t, ok)
	start, ok = st.add(context.Background(), sighting{identity: "n1", source: workflows.SourceEvent, at: at.Add(time.Second)}, 3)
	require.False(t, start, "one goroutine")
	require.True(t, ok)
	_, _ = st.add(context.Background(), sighting{identity: "n1", source: workflows.SourceDiscovery, at: at.Add(-time.Second)}, 3)
	held := st.held()
	require.Len(t, held, 1)
	require.Equal(t, at.Add(time.Second), held[0].at)
	require.Equal(t, workflows.SourceEvent, held[0].source)
	require.Equal(t, 3, held[0].looks)
	st.looked(held[0], false)
	require.Equal(t, 2, st.held()[0].looks)
	st.looked(held[0], true)
	require.Nil(t, st.held())
	start, _ = st.add(context.Background(), sighting{identity: "n2"}, 3)
	require.True(t, start, "the goroutine ended with nothing held: a new one starts")
}
