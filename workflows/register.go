package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// HostWorkflow is ProvisionHost bound to the policy of the worker that registers it.
type HostWorkflow struct {
	Policy Policy
	Hooks  Hooks
	// Signer signs server JWTs in a local activity of this worker (the worker's
	// activities.LocalSigner); nil where nothing is signed (a replayer) or the test registers it.
	Signer *activities.LocalSigner
}

// Registry is where workflows are registered: a worker, a replayer, a test environment.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// Register registers ProvisionHost bound to p, and ProvisionerControl: the one registration the
// service, the replayer and the tests share.
func Register(r Registry, p Policy) { HostWorkflow{Policy: p}.Register(r) }

// Register registers ProvisionHost as h and ProvisionerControl on r.
func (h HostWorkflow) Register(r Registry) {
	r.RegisterWorkflowWithOptions(h.ProvisionHost, workflow.RegisterOptions{Name: WorkflowName})
	r.RegisterWorkflowWithOptions(ProvisionerControl, workflow.RegisterOptions{Name: ControlWorkflowName})
}
