package service

import (
	"errors"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/internal/metrics"
	"github.com/choria-temporal/provisioner/workflows"
)

// ProvisionErrors counts choria_provisioner_provision_errors once per host run that ends failed,
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
	if runFailed(err) && !workflow.IsReplaying(ctx) {
		i.m.ProvisionErrors.WithLabelValues(i.m.Site).Inc()
		step, _ := workflow.GetTypedSearchAttributes(ctx).GetKeyword(workflows.StepKey)
		i.m.FailedRuns.WithLabelValues(i.m.Site, step).Inc()
	}
	return res, err
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
