package discovery

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/choria-temporal/provisioner/common/metrics"
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

// The settler's tests run in a synctest bubble (see the loop's): a recheck there takes no wall
// time, and after synctest.Wait every look due by then has been made.

// A host sighted again and again while its run is finishing is held once: one look per recheck,
// not one per sighting, and one start when the run has closed.
func TestSettleHoldsAHostOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleetStarter(t)
		d, _ := newTestDiscovererWith(t, f, nil, zap.NewNop())
		for range 50 {
			require.NoError(t, d.Sighted(context.Background(), "n1", workflows.SourceDiscovery, time.Now()))
		}
		require.Equal(t, 1, d.settle.size())
		time.Sleep(5*d.recheck + d.recheck/2)
		synctest.Wait()
		describes, starts := f.counts("n1")
		require.Equal(t, 50+5, describes, "the 50 sightings' own describes and one look a recheck")
		require.Zero(t, starts)

		f.close()
		time.Sleep(d.recheck)
		synctest.Wait()
		_, starts = f.counts("n1")
		require.Equal(t, 1, starts, "the first look after the run closed starts the host")
		require.Zero(t, d.settle.size())
		time.Sleep(3 * d.recheck)
		synctest.Wait()
		describes, starts = f.counts("n1")
		require.Equal(t, 1, starts, "the sightings held once start once")
		require.Equal(t, 50+6, describes, "no look after the start")
	})
}

// The settler holds at most its size; a sighting beyond it is refused and counted (the next
// sweep finds the host), and however many hosts it holds, it runs one goroutine.
func TestSettleIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFleetStarter(t)
		d, m := newTestDiscovererWith(t, f, nil, zap.NewNop())
		d.settle = newSettler(300)
		before := runtime.NumGoroutine()
		for i := range 400 {
			require.NoError(t, d.Sighted(context.Background(), fmt.Sprintf("n%d", i), workflows.SourceDiscovery, time.Now()))
		}
		require.Equal(t, 300, d.settle.size())
		require.Equal(t, 100.0, refused(m, metrics.RefusedFull))
		// LessOrEqual: a goroutine another test left may end meanwhile, outside the bubble
		require.LessOrEqual(t, runtime.NumGoroutine(), before+1, "one goroutine, not one per held sighting")

		f.close()
		time.Sleep(d.recheck)
		synctest.Wait()
		require.Zero(t, d.settle.size(), "one look at each after the run closed")
		// the goroutine ends at the next look, which finds nothing held
		time.Sleep(d.recheck)
		synctest.Wait()
		d.settle.mu.Lock()
		running := d.settle.running
		d.settle.mu.Unlock()
		require.False(t, running, "the settler's goroutine outlived what it held")
		require.LessOrEqual(t, runtime.NumGoroutine(), before)
		_, starts := f.counts("n0")
		require.Equal(t, 1, starts)
		_, starts = f.counts("n399")
		require.Zero(t, starts, "refused, not held")
	})
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
