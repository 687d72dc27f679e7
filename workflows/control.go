package workflows

import (
	"go.temporal.io/sdk/workflow"
)

// controlContinueAfter bounds the control workflow's history: it continues as new after this many
// pause and resume signals.
const controlContinueAfter = 500

// ProvisionerControl holds the fleet-wide pause state of one task queue. It never ends on its own;
// the operator CLI starts it with its first signal.
func ProvisionerControl(ctx workflow.Context, state ControlState) error {
	if err := workflow.SetQueryHandler(ctx, ControlStateQuery, func() (ControlState, error) { return state, nil }); err != nil {
		return err
	}
	pause := workflow.GetSignalChannel(ctx, PauseSignal)
	resume := workflow.GetSignalChannel(ctx, ResumeSignal)
	for handled := 0; handled < controlContinueAfter; handled++ {
		var req ControlRequest
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, &req)
			if !state.Paused {
				state = ControlState{Paused: true, Since: req.At, By: req.By, Reason: req.Reason}
			}
		})
		sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, &req)
			state = ControlState{Paused: false, Since: req.At, By: req.By, Reason: req.Reason}
		})
		sel.Select(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	// drain what arrived meanwhile so no signal is lost across the continue-as-new
	for {
		var req ControlRequest
		switch {
		case pause.ReceiveAsync(&req):
			state = ControlState{Paused: true, Since: req.At, By: req.By, Reason: req.Reason}
		case resume.ReceiveAsync(&req):
			state = ControlState{Paused: false, Since: req.At, By: req.By, Reason: req.Reason}
		default:
			return workflow.NewContinueAsNewError(ctx, ProvisionerControl, state)
		}
	}
}
