// Package signalgate runs a gate on a workflow's signals as a Temporal worker interceptor. The
// gate itself (what a signal may do to a run: workflows.ControlSignals) is the workflow's
// decision and lives with it; this is the worker's wiring, apart because the SDK's interceptor
// package imports its client, which the deterministic package does not. It imports nothing of
// the provisioner's, so the workflows tests run their runs through it as the worker does.
package signalgate

import (
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// Run is a gate's side of one run.
type Run interface {
	// HandleSignal sees a signal before the run's code does; taken says the gate dealt with it
	// (admitted or dropped it), and false passes it on as it came.
	HandleSignal(ctx workflow.Context, signal string, arg *commonpb.Payloads) (taken bool)
	// Execute is the context the run's code executes in: how the gate hands it what it admitted.
	Execute(ctx workflow.Context) workflow.Context
}

// Interceptor gates the signals of every run that watch returns a Run for (ok false: the run's
// signals go on untouched, a workflow type the gate does not know, for one).
func Interceptor[R Run](watch func(workflowType string) (run R, ok bool)) interceptor.WorkerInterceptor {
	return &worker[R]{watch: watch}
}

type worker[R Run] struct {
	interceptor.WorkerInterceptorBase
	watch func(string) (R, bool)
}

func (w *worker[R]) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	run, ok := w.watch(workflow.GetInfo(ctx).WorkflowType.Name)
	if !ok {
		return next
	}
	return &inbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, run: run}
}

type inbound struct {
	interceptor.WorkflowInboundInterceptorBase
	run Run
}

func (i *inbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	if i.run.HandleSignal(ctx, in.SignalName, in.Arg) {
		return nil // dropped or delivered by the gate: failing the task would let any sender wedge the run
	}
	return i.Next.HandleSignal(ctx, in)
}

func (i *inbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return i.Next.ExecuteWorkflow(i.run.Execute(ctx), in)
}
