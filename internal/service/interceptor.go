package service

import (
	"errors"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/workflows"
)

// ProvisionErrors counts the runs' outcomes where each run's outcome is decided, once per run:
// choria_provisioner_provisioned for a run that provisioned its host (it restarted the server
// into its configuration, the restart confirmed or not; a stale sighting of a provisioned host
// restarted nothing), and choria_provisioner_provision_errors once per host run that ends failed,
// as the Choria Provisioner counted one per failed provisioning attempt of a host, and
// choria_provisioner_failed_runs_total by the step it failed at: the run's ProvisionStep search
// attribute, which the workflow sets to that step as it fails (its own state, from its history). A step's
// activity cannot tell: the workflow retries the helper itself, and some last failures do not
// fail the host (a stale sighting, an optional upgrade). Counted where the run's own result is
// known, and only when the workflow task is not a replay, so each failed run counts once on the
// worker that ran it.
func ProvisionErrors(m *metrics.Metrics) interceptor.WorkerInterceptor {
	return &provisionErrors{m: m}
}

type provisionErrors struct {
	interceptor.WorkerInterceptorBase
	m *metrics.Metrics
}

func (p *provisionErrors) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	if workflow.GetInfo(ctx).WorkflowType.Name != workflows.WorkflowName {
		return next
	}
	return &provisionErrorsInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, m: p.m}
}

type provisionErrorsInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	m *metrics.Metrics
}

func (i *provisionErrorsInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	res, err := i.Next.ExecuteWorkflow(ctx, in)
	if workflow.IsReplaying(ctx) {
		return res, err
	}
	if r, ok := res.(*workflows.ProvisionResult); ok && err == nil && provisioned(r) {
		i.m.Provisioned.WithLabelValues(i.m.Site).Inc()
	}
	if runFailed(err) {
		i.m.ProvisionErrors.WithLabelValues(i.m.Site).Inc()
		step, _ := workflow.GetTypedSearchAttributes(ctx).GetKeyword(workflows.StepKey)
		i.m.FailedRuns.WithLabelValues(i.m.Site, step).Inc()
	}
	return res, err
}

// provisioned is true for a run that provisioned its host: the restart step's activity cannot
// tell (an unconfirmed restart fails it, a re-run repeats it), the run's result can.
func provisioned(r *workflows.ProvisionResult) bool {
	return r != nil && r.Outcome == workflows.OutcomeProvisioned && !r.RestartedAt.IsZero()
}

// runFailed is true for an error that ends the run failed: not a continue-as-new (a host deferred
// often), nor a cancellation (an operator's decision).
func runFailed(err error) bool {
	if err == nil || workflow.IsContinueAsNewError(err) {
		return false
	}
	var canceled *temporal.CanceledError
	return !errors.As(err, &canceled)
}
