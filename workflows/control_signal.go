package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"
)

// ControlRequestChannel names the workflow-internal channel on which ControlSignals delivers the
// pause and resume requests it verified. It is not a signal anyone may send: a signal of that name
// is refused like a forged one.
const ControlRequestChannel = "provisioner-control-verified"

// ControlRequestMaxAge bounds how long a sealed pause or resume request may be carried before it
// arrives: the batch that signals every running host of a large fleet takes minutes, and a request
// copied out of a history and sent again later must not be taken for a new one.
const ControlRequestMaxAge = time.Hour

// ControlRequestSkew is how far in the future (by the workflow task's clock) a request may say
// it was made: the operator's clock and the worker's differ a little.
const ControlRequestSkew = 5 * time.Minute

// Reasons a pause or resume signal is refused: the reason label of
// choria_provisioner_refused_signals_total.
const (
	SignalUnsealed    = "unsealed"    // not sealed with the provisioner's key for this task queue's control scope
	SignalEmpty       = "empty"       // no payload
	SignalMalformed   = "malformed"   // sealed, but not a control request
	SignalMisdirected = "misdirected" // a request for the other action, another task queue, or the internal channel
	SignalStale       = "stale"       // made too long ago, in the future, or before the last one this run accepted
)

// SignalReasons are every reason label of choria_provisioner_refused_signals_total.
func SignalReasons() []string {
	return []string{SignalUnsealed, SignalEmpty, SignalMalformed, SignalMisdirected, SignalStale}
}

// ErrRefusedSignal is matched by every refusal ControlSignals reports.
var ErrRefusedSignal = errors.New("control signal refused")

// RefusedSignalError says why a pause or resume signal was refused.
type RefusedSignalError struct {
	Reason     string
	Signal     string
	WorkflowID string
	Err        error
}

func (e *RefusedSignalError) Error() string {
	return fmt.Sprintf("%v: %s signal to %s (%s): %v", ErrRefusedSignal, e.Signal, e.WorkflowID, e.Reason, e.Err)
}

func (e *RefusedSignalError) Unwrap() error        { return e.Err }
func (e *RefusedSignalError) Is(target error) bool { return target == ErrRefusedSignal }

// ControlSignals is the gate that admits pause and resume signals to host runs and to the control
// workflow; the worker runs it as an interceptor (signalgate.Interceptor(ControlSignals(...).Watch)).
// It reads each signal's payload as it arrived, before any workflow code decodes it, and delivers
// on ControlRequestChannel only a ControlRequest that
//   - is sealed with dc (the worker's codec: its keys, strictly) for the control scope of the
//     run's own task queue, ControlWorkflowID(queue): the operator's SignalWithStart seals for it
//     (the control workflow's ID) and so does the batch that signals the running hosts;
//   - decodes strictly as a ControlRequest naming the signal's action and the run's task queue;
//   - was made within ControlRequestMaxAge before the workflow task in which the run reads it (and
//     at most ControlRequestSkew after), and not before the last request the run accepted.
//
// Everything else is dropped and reported to refused once (not again on a replay). A refusal
// costs one workflow task and no command, so a hostile signal can neither change the state nor
// fail the task, and the run's behaviour replays the same from its history.
func ControlSignals(dc converter.DataConverter, refused func(*RefusedSignalError)) *SignalGate {
	return &SignalGate{dc: dc, refused: refused}
}

// SignalGate is ControlSignals: the worker's codec and where refusals go.
type SignalGate struct {
	dc      converter.DataConverter
	refused func(*RefusedSignalError)
}

// Watch is the gate's side of a new run of workflowType: the host's and the control workflow's
// runs are gated, any other is left alone.
func (g *SignalGate) Watch(workflowType string) (*ControlRun, bool) {
	switch workflowType {
	case WorkflowName, ControlWorkflowName:
		return &ControlRun{g: g}, true
	}
	return nil, false
}

// ControlRun is the gate of one run: the requests it admitted, and when the last one was made.
type ControlRun struct {
	g *SignalGate
	// last is when the last request this run accepted was made
	last time.Time
	ch   workflow.Channel
}

// HandleSignal takes the pause and resume signals (and any signal named as the internal channel)
// and leaves every other signal to the run.
func (i *ControlRun) HandleSignal(ctx workflow.Context, signal string, arg *commonpb.Payloads) bool {
	switch signal {
	case PauseSignal, ResumeSignal, ControlRequestChannel:
	default:
		return false
	}
	req, reason, err := i.admit(signal, workflow.GetInfo(ctx).TaskQueueName, arg)
	if err != nil {
		i.refuse(ctx, reason, signal, err)
		return true // dropped
	}
	if !i.requests(ctx).SendAsync(req) {
		// copies of a sealed request sent faster than the run reads them: the run heeds one
		i.refuse(ctx, SignalStale, signal, fmt.Errorf("%d verified requests wait unread", controlRequestsSize))
	}
	return true
}

// refuse reports a refused signal once: not again when the run replays.
func (i *ControlRun) refuse(ctx workflow.Context, reason, signal string, err error) {
	if !workflow.IsReplaying(ctx) && i.g.refused != nil {
		i.g.refused(&RefusedSignalError{Reason: reason, Signal: signal, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Err: err})
	}
}

// Execute hands the run its reader of verified requests, in its context.
func (i *ControlRun) Execute(ctx workflow.Context) workflow.Context {
	i.requests(ctx)
	return workflow.WithValue(ctx, controlRequestsKey{}, i)
}

// requests is the run's channel of verified requests. A signal may come before the run's code
// first runs (SignalWithStart), and the SDK handles it outside the run's coroutines, where a
// signal channel cannot be asked for: so the channel is the gate's, made on first use.
func (i *ControlRun) requests(ctx workflow.Context) workflow.Channel {
	if i.ch == nil {
		i.ch = workflow.NewNamedBufferedChannel(ctx, ControlRequestChannel, controlRequestsSize)
	}
	return i.ch
}

// controlRequestsSize bounds the verified requests that wait for the run to read them: only
// requests sealed with the provisioner's key get there.
const controlRequestsSize = 10000

type controlRequestsKey struct{}

// requestReader is how a run reads the pause and resume requests ControlSignals verified.
type requestReader struct {
	in *ControlRun // nil: the worker does not verify them (no ControlSignals)
	ch workflow.ReceiveChannel
}

// controlRequests is the reader of the run in ctx: one that never receives when the worker does
// not verify the requests, so that no signal reaches the run.
func controlRequests(ctx workflow.Context) requestReader {
	if in, ok := ctx.Value(controlRequestsKey{}).(*ControlRun); ok {
		return requestReader{in: in, ch: in.ch}
	}
	return requestReader{ch: workflow.NewChannel(ctx)}
}

// Receive blocks until the next request made in time arrives; ok is false when ctx ended.
func (r requestReader) Receive(ctx workflow.Context) (req ControlRequest, ok bool) {
	for ctx.Err() == nil {
		r.ch.Receive(ctx, &req)
		if ctx.Err() == nil && r.timely(ctx, req) {
			return req, true
		}
	}
	return ControlRequest{}, false
}

// ReceiveAsync is the next request made in time that has arrived, if any.
func (r requestReader) ReceiveAsync(ctx workflow.Context) (req ControlRequest, ok bool) {
	for r.ch.ReceiveAsync(&req) {
		if r.timely(ctx, req) {
			return req, true
		}
	}
	return ControlRequest{}, false
}

func (r requestReader) timely(ctx workflow.Context, req ControlRequest) bool {
	err := r.in.timely(req, workflow.Now(ctx))
	// a host's run heeds only requests made after it started (the operator's batch is stamped when
	// it is sent): an older pause copied from a history holds no run started since
	if info := workflow.GetInfo(ctx); err == nil && info.WorkflowType.Name == WorkflowName && req.At.Before(info.WorkflowStartTime.Add(-ControlRequestSkew)) {
		err = fmt.Errorf("the request was made at %s, before this run started (%s)", req.At.UTC().Format(time.RFC3339), info.WorkflowStartTime.UTC().Format(time.RFC3339))
	}
	if err != nil {
		r.in.refuse(ctx, SignalStale, req.Action, err)
		return false
	}
	r.in.last = req.At
	return true
}

// admit checks one pause or resume signal; it returns the request or why it is refused.
func (i *ControlRun) admit(signal, queue string, arg *commonpb.Payloads) (ControlRequest, string, error) {
	var req ControlRequest
	if signal == ControlRequestChannel {
		return req, SignalMisdirected, errors.New("the channel of verified requests takes no signal")
	}
	if len(arg.GetPayloads()) == 0 {
		return req, SignalEmpty, errors.New("the signal carries no request")
	}
	if len(arg.GetPayloads()) != 1 {
		return req, SignalMalformed, fmt.Errorf("the signal carries %d payloads, not one request", len(arg.GetPayloads()))
	}
	scope := converter.WithDataConverterSerializationContext(i.g.dc,
		converter.WorkflowSerializationContext{WorkflowID: ControlWorkflowID(queue)})
	var raw json.RawMessage
	if err := scope.FromPayloads(arg, &raw); err != nil {
		return req, SignalUnsealed, err
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return req, SignalEmpty, errors.New("the signal's payload is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, SignalMalformed, fmt.Errorf("not a control request: %w", err)
	}
	switch {
	case req.Action != signal:
		return req, SignalMisdirected, fmt.Errorf("the request is for %q, the signal is %q", req.Action, signal)
	case req.TaskQueue != queue:
		return req, SignalMisdirected, fmt.Errorf("the request is for task queue %q, the run is on %q", req.TaskQueue, queue)
	case req.At.IsZero():
		return req, SignalMalformed, errors.New("the request does not say when it was made")
	}
	return req, "", nil
}

// timely checks when req was made against now, the time of the workflow task that reads it (a
// signal is handled before its task's time is known, so this waits for the run to read it).
func (i *ControlRun) timely(req ControlRequest, now time.Time) error {
	switch {
	case req.At.Before(now.Add(-ControlRequestMaxAge)):
		return fmt.Errorf("the request was made at %s, more than %s before %s", req.At.UTC().Format(time.RFC3339), ControlRequestMaxAge, now.UTC().Format(time.RFC3339))
	case req.At.After(now.Add(ControlRequestSkew)):
		return fmt.Errorf("the request says it was made at %s, after %s", req.At.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case req.At.Before(i.last):
		return fmt.Errorf("the request was made at %s, before the last one accepted (%s)", req.At.UTC().Format(time.RFC3339), i.last.UTC().Format(time.RFC3339))
	}
	return nil
}
