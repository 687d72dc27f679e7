package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/choria-io/go-choria/lifecycle"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

func startupEvent(t testing.TB, identity, component string) []byte {
	t.Helper()
	ev, err := lifecycle.New(lifecycle.Startup, lifecycle.Identity(identity), lifecycle.Component(component), lifecycle.Version("0.30.2"))
	require.NoError(t, err)
	j, err := json.Marshal(ev)
	require.NoError(t, err)
	return j
}

type recordingStarter struct {
	mu        sync.Mutex
	calls     []client.StartWorkflowOptions
	args      []workflows.ProvisionInput
	err       error
	described int
	latest    *workflowpb.WorkflowExecutionInfo // the host's latest run; nil: none
	pending   int                               // activities pending in it
	// describeErr: Temporal does not answer a description (a partition)
	describeErr error
	result      *workflows.ProvisionResult // its result; nil: cannot be read
	results     int                        // results read
	// closeAfter: after this many descriptions, the run is closed (latest becomes closed)
	closeAfter int
	closed     *workflowpb.WorkflowExecutionInfo
	// open is what a listing of the open runs returns, page by page; listErr fails it
	open    []*workflowpb.WorkflowExecutionInfo
	listErr error
	lists   []*workflowservice.ListWorkflowExecutionsRequest
}

func (r *recordingStarter) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists = append(r.lists, req)
	if r.listErr != nil {
		return nil, r.listErr
	}
	from := 0
	if len(req.NextPageToken) > 0 {
		fmt.Sscan(string(req.NextPageToken), &from)
	}
	to := min(from+int(req.PageSize), len(r.open))
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: r.open[from:to]}
	if to < len(r.open) {
		resp.NextPageToken = []byte(fmt.Sprint(to))
	}
	return resp, nil
}

func (r *recordingStarter) DescribeWorkflowExecution(ctx context.Context, id, run string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.described++
	if r.describeErr != nil {
		return nil, r.describeErr
	}
	if r.closed != nil && r.described > r.closeAfter {
		r.latest, r.pending = r.closed, 0
	}
	if r.latest == nil {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	resp := &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: ours(r.latest)}
	for i := 0; i < r.pending; i++ {
		resp.PendingActivities = append(resp.PendingActivities, &workflowpb.PendingActivityInfo{ActivityId: fmt.Sprint(i)})
	}
	return resp, nil
}

func (r *recordingStarter) GetWorkflow(ctx context.Context, id, run string) client.WorkflowRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results++
	return resultRun{r.result}
}

func (r *recordingStarter) started() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// resultRun is a closed run whose result is res (nil: the read fails).
type resultRun struct{ res *workflows.ProvisionResult }

func (resultRun) GetID() string                  { return "" }
func (resultRun) GetRunID() string               { return "" }
func (resultRun) GetFirstExecutionRunID() string { return "" }
func (r resultRun) Get(ctx context.Context, v any) error {
	if r.res == nil {
		return errors.New("history unavailable")
	}
	*(v.(*workflows.ProvisionResult)) = *r.res
	return nil
}
func (r resultRun) GetWithOptions(ctx context.Context, v any, _ client.WorkflowRunGetOptions) error {
	return r.Get(ctx, v)
}

func (r *recordingStarter) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, opts)
	r.args = append(r.args, args[0].(workflows.ProvisionInput))
	return nil, r.err
}

func newTestDiscoverer(t *testing.T, s Starter) (*Discoverer, *metrics.Metrics) {
	return newTestDiscovererWith(t, s, nil, zap.NewNop())
}

// newTestDiscovererWith is newTestDiscoverer with options changed by change (nil: none) and a
// logger of the test's.
func newTestDiscovererWith(t *testing.T, s Starter, change func(*Options), log *zap.Logger) (*Discoverer, *metrics.Metrics) {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	o := Options{Interval: time.Minute, Component: "provision_mode_server", Start: hostruns.Starter{TaskQueue: "tq", Site: "lab"}}
	if change != nil {
		change(&o)
	}
	return New(nil, s, o, m, log), m
}

func searchAttrs(t *testing.T, kv map[string]string) *commonpb.SearchAttributes {
	t.Helper()
	sa := &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{}}
	for k, v := range kv {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		require.NoError(t, err)
		sa.IndexedFields[k] = p
	}
	return sa
}

// ours is info as a run a provisioner on task queue "tq" started says it (a test's run names its
// type and task queue only when it is someone else's).
func ours(info *workflowpb.WorkflowExecutionInfo) *workflowpb.WorkflowExecutionInfo {
	if info.GetType() != nil {
		return info
	}
	info = proto.Clone(info).(*workflowpb.WorkflowExecutionInfo)
	info.Type, info.TaskQueue = &commonpb.WorkflowType{Name: workflows.WorkflowName}, "tq"
	return info
}
