// Package control is every outside caller's way to the fleet-wide pause state: the control
// workflow (workflows.ProvisionerControl) and the pause signal to running hosts. It does client
// I/O, so it lives apart from the deterministic workflow code.
package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	batchpb "go.temporal.io/api/batch/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/choria-temporal/provisioner/workflows"
)

// PauseCacheTTL bounds how stale a Client's cached pause state may be: discovery asks
// for it at every sighting, and a burst of startup events must not become a burst of queries.
const PauseCacheTTL = 2 * time.Second

// PauseSettle is how long SetPaused waits between recording a pause and signaling the running
// hosts: longer than PauseCacheTTL, so a host that discovery started just before its cached state
// expired is running by then, and is caught by the signal.
const PauseSettle = PauseCacheTTL + time.Second

// Client is every outside caller's way to the fleet-wide pause state of one task queue:
// the control workflow (read, cached read, write) and the pause signal to running hosts.
type Client struct {
	c         client.Client
	namespace string
	taskQueue string

	mu     sync.Mutex
	read   time.Time
	paused bool
}

// New reaches the control workflow of taskQueue in namespace through c.
func New(c client.Client, namespace, taskQueue string) *Client {
	if namespace == "" {
		namespace = client.DefaultNamespace
	}
	return &Client{c: c, namespace: namespace, taskQueue: taskQueue}
}

// State queries the control workflow. No control workflow means never paused.
func (cc *Client) State(ctx context.Context) (workflows.ControlState, error) {
	var state workflows.ControlState
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := cc.c.QueryWorkflow(qctx, workflows.ControlWorkflowID(cc.taskQueue), "", workflows.ControlStateQuery)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return state, nil
	}
	if err != nil {
		return state, err
	}
	return state, v.Get(&state)
}

// Paused reports whether provisioning is paused, read at most every PauseCacheTTL.
func (cc *Client) Paused(ctx context.Context) (bool, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if !cc.read.IsZero() && time.Since(cc.read) < PauseCacheTTL {
		return cc.paused, nil
	}
	state, err := cc.State(ctx)
	if err != nil {
		return false, err
	}
	cc.paused, cc.read = state.Paused, time.Now()
	return cc.paused, nil
}

// SetPaused records the pause state in the control workflow (starting it with its first signal),
// then signals every running host to hold before, or go on with, its next step: one batch
// operation by query, not a signal per host. It returns how many hosts were signaled.
func (cc *Client) SetPaused(ctx context.Context, paused bool, req workflows.ControlRequest) (int, error) {
	signal := workflows.ResumeSignal
	if paused {
		signal = workflows.PauseSignal
	}
	id := workflows.ControlWorkflowID(cc.taskQueue)
	if _, err := cc.c.SignalWithStartWorkflow(ctx, id, signal, req, client.StartWorkflowOptions{ID: id, TaskQueue: cc.taskQueue},
		workflows.ControlWorkflowName, workflows.ControlState{}); err != nil {
		return 0, fmt.Errorf("recording the pause state: %w", err)
	}
	if paused {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(PauseSettle):
		}
	}
	return cc.signalRunning(ctx, signal, req)
}

// batchPoll is how often signalRunning asks whether its batch operation has finished.
const batchPoll = 200 * time.Millisecond

func (cc *Client) signalRunning(ctx context.Context, signal string, req workflows.ControlRequest) (int, error) {
	jobID := fmt.Sprintf("%s-%s-%d", signal, cc.taskQueue, req.At.UnixNano())
	start := &workflowservice.StartBatchOperationRequest{
		Namespace: cc.namespace, JobId: jobID, Reason: fmt.Sprintf("hosts %s by %s: %s", signal, req.By, req.Reason),
		VisibilityQuery: workflows.HostsQuery{TaskQueue: cc.taskQueue, Running: true}.String(),
		Operation: &workflowservice.StartBatchOperationRequest_SignalOperation{
			SignalOperation: &batchpb.BatchOperationSignal{Signal: signal, Identity: req.By}},
	}
	for {
		_, err := cc.c.WorkflowService().StartBatchOperation(ctx, start)
		var busy *serviceerror.ResourceExhausted
		if !errors.As(err, &busy) {
			if err != nil {
				return 0, fmt.Errorf("signaling running hosts: %w", err)
			}
			break
		}
		// the namespace runs as many batch operations at once as it allows (another pause): wait
		if err := sleep(ctx, time.Second); err != nil {
			return 0, err
		}
	}
	for {
		d, err := cc.c.WorkflowService().DescribeBatchOperation(ctx, &workflowservice.DescribeBatchOperationRequest{Namespace: cc.namespace, JobId: jobID})
		if err != nil {
			return 0, fmt.Errorf("signaling running hosts: %w", err)
		}
		switch d.GetState() {
		case enumspb.BATCH_OPERATION_STATE_COMPLETED:
			return int(d.GetCompleteOperationCount()), nil
		case enumspb.BATCH_OPERATION_STATE_FAILED:
			return int(d.GetCompleteOperationCount()), fmt.Errorf("signaling running hosts: batch %s failed after %d of %d hosts", jobID, d.GetCompleteOperationCount(), d.GetTotalOperationCount())
		}
		if err := sleep(ctx, batchPoll); err != nil {
			return 0, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
