// Package nextbuild is a test-only change to the host workflow, made the way a release would make
// it (docs/architecture.md, "Upgrading the workflow"): a provisioner with its interceptor reads
// the server's inventory once more before configuring it, guarded by workflow.GetVersion so that
// it replays the runs an older build began. The rolling-upgrade test runs it as the build an old
// replica is upgraded to; ProvisionHost itself is not changed.
package nextbuild

import (
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/workflows"
)

// ChangeID names the change in the runs' version markers (and TemporalChangeVersion).
const ChangeID = "nextbuild-inventory-before-configure"

// Interceptor makes a worker's ProvisionHost the next build's.
func Interceptor() interceptor.WorkerInterceptor { return &workerInterceptor{} }

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (w *workerInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	if workflow.GetInfo(ctx).WorkflowType.Name != workflows.WorkflowName {
		return next
	}
	return &inbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type inbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *inbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&outboundCalls{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}})
}

type outboundCalls struct {
	interceptor.WorkflowOutboundInterceptorBase
}

// ExecuteActivity runs the extra inventory read right before a configure: one GetVersion marker
// (and its TemporalChangeVersion upsert) and one activity more per host. A run that an older
// build had already taken past this point replays without them (DefaultVersion).
func (o *outboundCalls) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if activityType == activities.ConfigureName && len(args) == 1 {
		if in, ok := args[0].(activities.ConfigureInput); ok && workflow.GetVersion(ctx, ChangeID, workflow.DefaultVersion, 1) == 1 {
			// the read acts only on a request its run sealed for the inventory step: the
			// configure request's seal, for that step (the reply is not read)
			req := in.Request
			req.Step = activities.StepInventory
			read := activities.HostInput{Requested: activities.Requested{Request: req}, Identity: in.Identity}
			var inv activities.InventoryResult
			if err := o.Next.ExecuteActivity(ctx, activities.InventoryName, read).Get(ctx, &inv); err != nil {
				return failed(ctx, err)
			}
		}
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

// failed is a settled future with err: the configure step fails as its read did.
func failed(ctx workflow.Context, err error) workflow.Future {
	f, s := workflow.NewFuture(ctx)
	s.SetError(err)
	return f
}
