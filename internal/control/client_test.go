package control

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/choria-temporal/provisioner/workflows"
)

// fakeTemporal holds one workflow under the control workflow's ID (or none) and answers its
// state query, after release when release is set.
type fakeTemporal struct {
	client.Client // unused methods panic
	kind, queue   string
	status        enumspb.WorkflowExecutionStatus
	missing       bool
	state         workflows.ControlState
	queryErr      error
	release       chan struct{}
	queries       atomic.Int32
	signaled      atomic.Int32
}

func (f *fakeTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if f.missing {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: "run-1"},
		Type:      &commonpb.WorkflowType{Name: f.kind}, TaskQueue: f.queue, Status: f.status,
	}}, nil
}

func (f *fakeTemporal) QueryWorkflow(ctx context.Context, _, _, _ string, _ ...any) (converter.EncodedValue, error) {
	f.queries.Add(1)
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.queryErr != nil {
		return nil, f.queryErr
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(f.state)
	if err != nil {
		return nil, err
	}
	return encoded{p}, nil
}

func (f *fakeTemporal) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	f.signaled.Add(1)
	return nil, errors.New("not expected")
}

type encoded struct{ p *commonpb.Payloads }

func (e encoded) HasValue() bool { return true }
func (e encoded) Get(ptr any) error {
	return converter.GetDefaultDataConverter().FromPayloads(e.p, ptr)
}

func ours() *fakeTemporal {
	return &fakeTemporal{kind: workflows.ControlWorkflowName, queue: "q", status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
}

// While one caller's read of the state hangs (Temporal unreachable), every other caller answers
// at once (issue 44: a lock held across the 5 s query queued every startup event behind it): from
// the last read while it is young, and paused (fail closed) before there is one.
func TestPausedDoesNotQueueBehindASlowRead(t *testing.T) {
	f := ours()
	f.release = make(chan struct{})
	cc := New(f, "", "q", nil)

	first := make(chan error, 1)
	go func() { _, err := cc.Paused(context.Background()); first <- err }()
	require.Eventually(t, func() bool { return f.queries.Load() == 1 }, 10*time.Second, time.Millisecond)

	answered := make(chan struct{})
	var paused bool
	var err error
	go func() { paused, err = cc.Paused(context.Background()); close(answered) }()
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		close(f.release)
		t.Fatal("a caller waited for another's read of the pause state")
	}
	require.True(t, paused, "no state read yet must mean paused")
	require.ErrorIs(t, err, ErrNotRead)
	require.EqualValues(t, 1, f.queries.Load(), "one read at a time")

	close(f.release)
	require.NoError(t, <-first)

	// the read is cached: young, it answers every caller without another query
	p, err := cc.Paused(context.Background())
	require.NoError(t, err)
	require.False(t, p)
	require.EqualValues(t, 1, f.queries.Load())
}

// A cached state older than PauseStateMaxAge while the next read hangs is paused (fail closed).
func TestPausedFailsClosedWhenTheCachedStateIsOld(t *testing.T) {
	f := ours()
	cc := New(f, "", "q", nil)
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	cc.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	p, err := cc.Paused(context.Background())
	require.NoError(t, err)
	require.False(t, p)

	f.release = make(chan struct{})
	defer close(f.release)
	mu.Lock()
	now = now.Add(PauseCacheTTL)
	mu.Unlock()
	go func() { _, _ = cc.Paused(context.Background()) }()
	require.Eventually(t, func() bool { return f.queries.Load() == 2 }, 10*time.Second, time.Millisecond)
	p, err = cc.Paused(context.Background())
	require.NoError(t, err, "a young cached state answers while the next read is under way")
	require.False(t, p)

	mu.Lock()
	now = now.Add(PauseStateMaxAge)
	mu.Unlock()
	p, err = cc.Paused(context.Background())
	require.ErrorIs(t, err, ErrUnreadable)
	require.True(t, p)
}

// A workflow that is not the provisioner's running control workflow of the queue never answers
// for it: the state is unreadable and the fleet paused; the operator's write refuses it by name.
func TestControlStateNotOursIsPaused(t *testing.T) {
	for name, f := range map[string]*fakeTemporal{
		"another type":       {kind: "Squatter", queue: "q", status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, state: workflows.ControlState{Paused: false}},
		"another task queue": {kind: workflows.ControlWorkflowName, queue: "elsewhere", status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
	} {
		t.Run(name, func(t *testing.T) {
			cc := New(f, "", "q", nil)
			p, err := cc.Paused(context.Background())
			require.True(t, p)
			var notOurs *NotOursError
			require.ErrorAs(t, err, &notOurs)
			require.ErrorIs(t, err, ErrUnreadable)
			require.Zero(t, f.queries.Load(), "a squatter was asked")

			_, err = cc.SetPaused(context.Background(), false, workflows.ControlRequest{By: "ops", At: time.Now()})
			require.ErrorAs(t, err, &notOurs)
			require.Contains(t, err.Error(), "provisioner-control:q")
			require.Contains(t, err.Error(), f.kind)
			require.Zero(t, f.signaled.Load(), "the squatter was signaled")
		})
	}
}

func TestControlStateUnreadableIsPaused(t *testing.T) {
	closed := ours()
	closed.status = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
	failing := ours()
	failing.queryErr = serviceerror.NewUnavailable("no pollers")
	for name, f := range map[string]*fakeTemporal{"closed": closed, "query fails": failing} {
		t.Run(name, func(t *testing.T) {
			p, err := New(f, "", "q", nil).Paused(context.Background())
			require.True(t, p)
			require.ErrorIs(t, err, ErrUnreadable)
		})
	}
	t.Run("never started", func(t *testing.T) {
		p, err := New(&fakeTemporal{missing: true}, "", "q", nil).Paused(context.Background())
		require.NoError(t, err)
		require.False(t, p)
	})
	t.Run("ours", func(t *testing.T) {
		f := ours()
		f.state.Paused = true
		p, err := New(f, "", "q", nil).Paused(context.Background())
		require.NoError(t, err)
		require.True(t, p)
	})
}

// Pausing does not need a worker: with the control workflow's query failing (no worker polls),
// the request is still sent.
func TestSetPausedWithoutWorkers(t *testing.T) {
	f := ours()
	f.queryErr = serviceerror.NewUnavailable("no pollers")
	_, err := New(f, "", "q", nil).SetPaused(context.Background(), true, workflows.ControlRequest{By: "ops", At: time.Now()})
	require.ErrorContains(t, err, "not expected") // the fake's SignalWithStart
	require.EqualValues(t, 1, f.signaled.Load())
}
