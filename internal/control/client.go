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
	"go.temporal.io/sdk/converter"

	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// PauseCacheTTL bounds how stale a Client's cached pause state may be: discovery asks
// for it at every sighting, and a burst of startup events must not become a burst of queries.
const PauseCacheTTL = 2 * time.Second

// PauseStateMaxAge is how old the cached state may be while another caller reads it again: older
// than this (a read hangs on an unreachable Temporal), callers take the fleet as paused.
const PauseStateMaxAge = PauseCacheTTL + queryTimeout

// queryTimeout bounds one read of the control workflow.
const queryTimeout = 5 * time.Second

// PauseSettle is how long SetPaused waits between recording a pause and signaling the running
// hosts: longer than PauseCacheTTL, so a host that discovery started just before its cached state
// expired is running by then, and is caught by the signal.
const PauseSettle = PauseCacheTTL + time.Second

// Temporal is the part of the Temporal client the control workflow is reached through.
type Temporal interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	QueryWorkflow(ctx context.Context, workflowID, runID, queryType string, args ...any) (converter.EncodedValue, error)
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any, options client.StartWorkflowOptions,
		workflow any, workflowArgs ...any) (client.WorkflowRun, error)
	WorkflowService() workflowservice.WorkflowServiceClient
}

// Client is every outside caller's way to the fleet-wide pause state of one task queue:
// the control workflow (read, cached read, write) and the pause signal to running hosts.
type Client struct {
	c         Temporal
	namespace string
	taskQueue string
	dc        converter.DataConverter // seals the requests to the running hosts
	now       func() time.Time

	mu      sync.Mutex
	last    reading
	reading bool // a caller is reading the state now
}

// reading is one read of the state, and when it ended.
type reading struct {
	paused bool
	err    error
	at     time.Time
}

// New reaches the control workflow of taskQueue in namespace through c. dc is the data
// converter the requests to running hosts are sealed with (the operator's); nil leaves them as
// a plaintext worker reads them.
func New(c Temporal, namespace, taskQueue string, dc converter.DataConverter) *Client {
	if namespace == "" {
		namespace = client.DefaultNamespace
	}
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	return &Client{c: c, namespace: namespace, taskQueue: taskQueue, dc: dc, now: time.Now}
}

// ErrUnreadable is matched by every error that leaves the control state unknown: the fleet is then
// taken as paused.
var ErrUnreadable = errors.New("the control state cannot be read")

// NotOursError is a workflow holding the control workflow's ID that is not the provisioner's
// control workflow of the task queue: of another type, or on another task queue (a squatter).
type NotOursError struct {
	WorkflowID, RunID, Type, TaskQueue string
	WantQueue                          string
	// Running: it holds the ID now (a closed one only hides the state until hosts pause or
	// resume starts the provisioner's control workflow again)
	Running bool
}

func (e *NotOursError) Error() string {
	fix := "it has ended: hosts pause or hosts resume starts the provisioner's control workflow again"
	if e.Running {
		fix = fmt.Sprintf("it was started by someone else: terminate it (temporal workflow terminate --workflow-id %s) "+
			"to take the ID back, then hosts pause or hosts resume", e.WorkflowID)
	}
	return fmt.Sprintf("%v: workflow %s (run %s) is a %q on task queue %q, not the provisioner's control workflow (%s on %q); %s",
		ErrUnreadable, e.WorkflowID, e.RunID, e.Type, e.TaskQueue, workflows.ControlWorkflowName, e.WantQueue, fix)
}

func (e *NotOursError) Is(target error) bool { return target == ErrUnreadable }

// ClosedError is a control workflow that has ended: it never ends on its own, so someone ended it.
type ClosedError struct {
	WorkflowID, RunID, Status string
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("%v: the control workflow %s (run %s) is %s, though it never ends on its own; "+
		"hosts pause or hosts resume starts it again", ErrUnreadable, e.WorkflowID, e.RunID, e.Status)
}

func (e *ClosedError) Is(target error) bool { return target == ErrUnreadable }

// run is the control workflow's current run, when it is ours. Never started means none (nil).
func (cc *Client) run(ctx context.Context) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	id := workflows.ControlWorkflowID(cc.taskQueue)
	d, err := cc.c.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: describing %s: %w", ErrUnreadable, id, err)
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetType().GetName() != workflows.ControlWorkflowName || info.GetTaskQueue() != cc.taskQueue {
		return d, &NotOursError{WorkflowID: id, RunID: info.GetExecution().GetRunId(), Type: info.GetType().GetName(),
			TaskQueue: info.GetTaskQueue(), WantQueue: cc.taskQueue, Running: info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
	}
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return d, &ClosedError{WorkflowID: id, RunID: info.GetExecution().GetRunId(), Status: info.GetStatus().String()}
	}
	return d, nil
}

// State reads the control workflow: its current run, when it is the provisioner's control
// workflow of the task queue and running, answers the state query. No control workflow (none was
// ever started) means never paused. Every other failure matches ErrUnreadable.
func (cc *Client) State(ctx context.Context) (workflows.ControlState, error) {
	var state workflows.ControlState
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	d, err := cc.run(qctx)
	if err != nil || d == nil {
		return state, err
	}
	v, err := cc.c.QueryWorkflow(qctx, workflows.ControlWorkflowID(cc.taskQueue), d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), workflows.ControlStateQuery)
	if err == nil {
		err = v.Get(&state)
	}
	if err != nil {
		return workflows.ControlState{}, fmt.Errorf("%w: querying %s: %w", ErrUnreadable, workflows.ControlWorkflowID(cc.taskQueue), err)
	}
	return state, nil
}

// ErrNotRead is the state while its first read is under way.
var ErrNotRead = fmt.Errorf("%w: the first read is under way", ErrUnreadable)

// Paused reports whether provisioning is paused, read at most every PauseCacheTTL. When the state
// cannot be read it reports paused, with the reason (fail closed). One caller reads at a time, and
// without holding the lock: the others meanwhile answer from the last read while it is younger
// than PauseStateMaxAge, and paused after that, so that a slow or unreachable Temporal never
// queues every sighting behind one query.
func (cc *Client) Paused(ctx context.Context) (bool, error) {
	cc.mu.Lock()
	last, now := cc.last, cc.now()
	switch {
	case !last.at.IsZero() && now.Sub(last.at) < PauseCacheTTL:
		cc.mu.Unlock()
		return last.paused || last.err != nil, last.err
	case cc.reading && last.at.IsZero():
		cc.mu.Unlock()
		return true, ErrNotRead
	case cc.reading && now.Sub(last.at) >= PauseStateMaxAge:
		cc.mu.Unlock()
		return true, fmt.Errorf("%w: the last read ended %s ago, the next one is under way", ErrUnreadable, now.Sub(last.at).Round(time.Second))
	case cc.reading:
		cc.mu.Unlock()
		return last.paused || last.err != nil, last.err
	}
	cc.reading = true
	cc.mu.Unlock()

	state, err := cc.State(ctx)
	cc.mu.Lock()
	cc.last, cc.reading = reading{paused: state.Paused, err: err, at: cc.now()}, false
	cc.mu.Unlock()
	return state.Paused || err != nil, err
}

// SetPaused records the pause state in the control workflow (starting it with its first signal),
// then signals every running host to hold before, or go on with, its next step: one batch
// operation by query, not a signal per host. It returns how many hosts were signaled. The request
// is completed here (its action and task queue) and sealed for the task queue's control scope; a
// workflow of someone else's holding the control workflow's ID is refused, not signaled.
func (cc *Client) SetPaused(ctx context.Context, paused bool, req workflows.ControlRequest) (int, error) {
	signal := workflows.ResumeSignal
	if paused {
		signal = workflows.PauseSignal
	}
	id := workflows.ControlWorkflowID(cc.taskQueue)
	d, err := cc.run(ctx)
	var closed *ClosedError
	var notOurs *NotOursError
	switch {
	case errors.As(err, &closed), errors.As(err, &notOurs) && !notOurs.Running:
		// ended: the signal starts the provisioner's control workflow again, with the state it is told
	case err != nil:
		return 0, fmt.Errorf("recording the pause state: %w", err)
	case d != nil:
		// the control workflow ignores a request older than its state (an operator's clock behind
		// another's): made no earlier than it. Without workers the query fails; the pause is
		// recorded all the same, and read once they are back
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		var current workflows.ControlState
		v, err := cc.c.QueryWorkflow(qctx, id, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), workflows.ControlStateQuery)
		if err == nil && v.Get(&current) == nil && req.At.Before(current.Since) {
			req.At = current.Since
		}
		cancel()
	}
	req.Action, req.TaskQueue = signal, cc.taskQueue
	run, err := cc.c.SignalWithStartWorkflow(ctx, id, signal, req, client.StartWorkflowOptions{ID: id, TaskQueue: cc.taskQueue},
		workflows.ControlWorkflowName, workflows.ControlState{})
	if err != nil {
		return 0, fmt.Errorf("recording the pause state: %w", err)
	}
	// a squatter that took the ID between the read and the signal got a request it cannot use (it
	// is sealed for the control scope, and only recent); say so rather than report success
	if d, err := cc.c.DescribeWorkflowExecution(ctx, id, run.GetRunID()); err == nil {
		if info := d.GetWorkflowExecutionInfo(); info.GetType().GetName() != workflows.ControlWorkflowName || info.GetTaskQueue() != cc.taskQueue {
			return 0, fmt.Errorf("recording the pause state: %w", &NotOursError{WorkflowID: id, RunID: run.GetRunID(),
				Type: info.GetType().GetName(), TaskQueue: info.GetTaskQueue(), WantQueue: cc.taskQueue, Running: true})
		}
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
	// stamped now: a host's run heeds only requests made after it started (workflows.ControlSignals)
	req.At = cc.now().UTC()
	jobID := fmt.Sprintf("%s-%s-%d", signal, cc.taskQueue, req.At.UnixNano())
	// one payload for every host: sealed for the control scope, which each run's worker checks
	// (workflows.ControlSignals), since a batch cannot seal for each host's own workflow
	scope := converter.WithDataConverterSerializationContext(cc.dc,
		converter.WorkflowSerializationContext{Namespace: cc.namespace, WorkflowID: workflows.ControlWorkflowID(cc.taskQueue)})
	input, err := scope.ToPayloads(req)
	if err != nil {
		return 0, fmt.Errorf("sealing the %s request: %w", signal, err)
	}
	start := &workflowservice.StartBatchOperationRequest{
		Namespace: cc.namespace, JobId: jobID, Reason: fmt.Sprintf("hosts %s by %s: %s", signal, req.By, req.Reason),
		VisibilityQuery: hostruns.HostsQuery{TaskQueue: cc.taskQueue, Running: true}.String(),
		Operation: &workflowservice.StartBatchOperationRequest_SignalOperation{
			SignalOperation: &batchpb.BatchOperationSignal{Signal: signal, Input: input, Identity: req.By}},
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
