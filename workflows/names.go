// Package workflows holds ProvisionHost, the durable provisioning of one Choria Server, and
// ProvisionerControl, the fleet-wide pause: what they decide and what they record. Its files are
// its contract: names.go and ids.go what a client addresses, policy.go what the worker decides,
// input.go what a starter may ask, status.go and result.go what a run reports, searchattrs.go
// what it records for visibility, control.go the control workflow. How a client starts and lists
// runs is the subpackage hostruns: nothing here is client code.
package workflows

import "github.com/choria-temporal/provisioner/activities"

// WorkflowName is the registered name of ProvisionHost.
const WorkflowName = activities.HostWorkflowType

// StatusQuery returns the workflow's Status.
const StatusQuery = "status"

// PauseSignal holds a host's workflow before its next step; ResumeSignal lets it go on. The
// operator CLI sends them to every running host when provisioning is paused fleet-wide.
const (
	PauseSignal  = "pause"
	ResumeSignal = "resume"
)

// Helper decisions, as Status.HelperDecision.
const (
	DecisionConfigure = "configure"
	DecisionDefer     = "defer"
	DecisionShutdown  = "shutdown"
)

// Outcomes of a host, as the ProvisionOutcome search attribute and Status.Outcome.
const (
	OutcomeRunning     = "running"
	OutcomeDeferred    = "deferred"
	OutcomeFailed      = "failed"
	OutcomeProvisioned = "provisioned"
	OutcomeShutdown    = "shutdown"
)

// Steps, in the order they run (the activities' steps are named in their contract), and the
// states between and after them.
const (
	StepJWT       = activities.StepJWT
	StepGen25519  = activities.StepGen25519
	StepGencsr    = activities.StepGencsr
	StepInventory = activities.StepInventory
	StepHelper    = activities.StepHelper
	StepSign      = activities.StepSign
	StepConfigure = activities.StepConfigure
	StepUpgrade   = activities.StepUpgrade
	StepRestart   = activities.StepRestart
	StepShutdown  = activities.StepShutdown
	StepDeferred  = "deferred"
	StepDone      = "done"
)

// Sources of a sighting.
const (
	SourceDiscovery = "discovery"
	SourceEvent     = "event"
	SourceOperator  = "operator"
	SourceRenewal   = "renewal" // the renewal workflow asked the server to re-enter provisioning mode
)
