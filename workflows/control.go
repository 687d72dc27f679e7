package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// ControlWorkflowName is the fleet-wide control workflow: one per task queue, it holds whether
// provisioning is paused, so discovery (in every replica) and the operator CLI agree.
const ControlWorkflowName = "ProvisionerControl"

// ControlStateQuery returns a ControlState.
const ControlStateQuery = "state"

// ControlWorkflowID is the control workflow of a task queue.
func ControlWorkflowID(taskQueue string) string { return "provisioner-control:" + taskQueue }

// ControlRequest is the payload of PauseSignal and ResumeSignal, to the control workflow and to
// the running hosts alike: sealed for the control scope of its task queue (ControlWorkflowID), it
// says what it is for (Action, TaskQueue) and when it was made, so that a request copied out of a
// history serves no other purpose, queue or time (ControlSignals).
type ControlRequest struct {
	Action    string    `json:"action"`     // PauseSignal or ResumeSignal
	TaskQueue string    `json:"task_queue"` // the control scope
	By        string    `json:"by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
}

// ControlState is the fleet-wide state.
type ControlState struct {
	Paused bool      `json:"paused"`
	Since  time.Time `json:"since,omitempty"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// controlContinueAfter bounds the control workflow's history: it continues as new after this many
// pause and resume requests.
const controlContinueAfter = 500

// ProvisionerControl holds the fleet-wide pause state of one task queue. It never ends on its own;
// the operator CLI starts it with its first signal. It reads only the requests ControlSignals
// verified (sealed for this task queue's control scope, for the action signaled, made recently);
// a pause or resume signal of anyone else's never reaches it.
func ProvisionerControl(ctx workflow.Context, state ControlState) error {
	if err := workflow.SetQueryHandler(ctx, ControlStateQuery, func() (ControlState, error) { return state, nil }); err != nil {
		return err
	}
	requests := controlRequests(ctx)
	for handled := 0; handled < controlContinueAfter; handled++ {
		req, ok := requests.Receive(ctx)
		if !ok {
			return ctx.Err()
		}
		state = applyControl(ctx, state, req)
	}
	// drain what arrived meanwhile so no request is lost across the continue-as-new
	for {
		req, ok := requests.ReceiveAsync(ctx)
		if !ok {
			return workflow.NewContinueAsNewError(ctx, ProvisionerControl, state)
		}
		state = applyControl(ctx, state, req)
	}
}

// applyControl is the state after req: a pause keeps the first pause's record, a resume ends it.
// A request made before the state it would replace is ignored: a copy of an older request sent
// again (ControlSignals bounds its age, not its order across a continue-as-new).
func applyControl(ctx workflow.Context, state ControlState, req ControlRequest) ControlState {
	if req.At.Before(state.Since) {
		workflow.GetLogger(ctx).Warn("control request older than the state it would replace, ignored",
			"action", req.Action, "at", req.At, "since", state.Since)
		return state
	}
	switch {
	case req.Action == ResumeSignal:
		return ControlState{Paused: false, Since: req.At, By: req.By, Reason: req.Reason}
	case !state.Paused:
		return ControlState{Paused: true, Since: req.At, By: req.By, Reason: req.Reason}
	}
	return state
}
