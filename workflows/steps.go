package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// kind is what sort of step a row is; it decides where and how its activity runs.
type kind int

const (
	// kindRPC: a request to the host that decides nothing by itself (the reads, restart, upgrade,
	// shutdown); its activity retries it; a local activity in fast mode
	kindRPC kind = iota
	// kindDecide: the site's helper. The workflow runs each attempt itself, so that every failure
	// is its own ActivityTaskFailed event with its reason; it upserts ProvisionStep when it
	// starts (a host can spend minutes in a slow CMDB or CA); it goes to the helper task queue
	// when the policy says so (helper_rate_limit)
	kindDecide
	// kindSign: the worker's own signer (HostWorkflow.Signer), always a local activity
	kindSign
	// kindEffect: acts on the host with what the run decided (its key, its signed JWT): a regular
	// activity in fast mode too, so that everything it depends on is recorded before it runs
	// and a crash cannot make the run decide again and configure the host twice, differently
	kindEffect
)

// helperAttempts is how many times the workflow runs the helper's activity.
const helperAttempts = 5

// stepSpec is everything the workflow decides about one step: the one row a step has. A new
// step is a row here, a method on activities.Activities with its registration, and a call in
// the sequence (docs/architecture.md, "where a new step goes").
type stepSpec struct {
	step     string
	activity any // by method value: its name is the method's, the registered activity's
	kind     kind
	options  workflow.ActivityOptions // timeouts and the activity's own retries
	summary  string                   // what the step does, beside it in the Web UI
}

// attempts is how many times the workflow itself runs the step's activity.
func (s stepSpec) attempts() int {
	if s.kind == kindDecide {
		return helperAttempts
	}
	return 1
}

// findable: the step upserts ProvisionStep when it starts; the others are in the status only.
func (s stepSpec) findable() bool { return s.kind == kindDecide }

// localScheduleToClose bounds a local step with all its retries (five tries of at most the RPC
// timeout, with backoff).
const localScheduleToClose = 3 * time.Minute

// stepTable is every step, in the order a run takes them. Budgets follow the Choria
// Provisioner's (jwt 3, gen25519 5, inventory 5, configure 5, restart 3, shutdown 3) with more
// room where a failure is likely transient, and backoff so a flapping host does not spin. The
// table is built when a step runs, not held by the run: a run stays in the worker's cache
// between its tasks, at scale thousands of them (docs/performance.md).
func stepTable() []stepSpec {
	var a *activities.Activities // method values name the activities; the worker's are called
	return []stepSpec{
		row(StepJWT, a.FetchJWT, kindRPC, 5, time.Minute, "fetch and verify the provisioning JWT"),
		row(StepGen25519, a.Gen25519, kindRPC, 5, time.Minute, "have the server make an ed25519 key and prove it"),
		// the Choria Provisioner tried once; a new key per attempt is cheap
		row(StepGencsr, a.Gencsr, kindRPC, 2, time.Minute, "have the server make a key and CSR"),
		row(StepInventory, a.Inventory, kindRPC, 5, time.Minute, "read the server's inventory"),
		// helper_timeout bounds the helper; this a stuck worker
		row(StepHelper, a.RunHelper, kindDecide, 1, 5*time.Minute, "waiting for the site's helper to decide the configuration"),
		row(StepUpgrade, a.ReleaseUpdate, kindRPC, 3, 2*time.Minute, "upgrade the server to the helper's version"), // as the Choria Provisioner
		row(StepSign, a.SignServerJWT, kindSign, 2, 30*time.Second, "sign the server's JWT"),
		row(StepConfigure, a.Configure, kindEffect, 5, time.Minute, "send the configuration"),
		// five, not the original's three: a broker restart (the client back after ~4 s) must not
		// fail a configured host and have it provisioned again (TestIntegrationFaultCompound)
		row(StepRestart, a.Restart, kindRPC, 5, time.Minute, "restart the server into its configuration"),
		// a host told to shut down is often gone before a third try
		row(StepShutdown, a.Shutdown, kindRPC, 2, time.Minute, "shut the server down at the helper's request"),
	}
}

// specOf is the step's row.
func specOf(step string) stepSpec {
	for _, s := range stepTable() {
		if s.step == step {
			return s
		}
	}
	panic("workflows: no row for step " + step) // a step constant without a row: a programming error
}

// MayBeFinishing says whether an open run whose ProvisionStep search attribute is step may be
// past its restart RPC: at the last step a run makes findable (it upserts none after it), or at
// restart (runs of earlier builds upserted every step). Discovery judges a sighting of such a
// host by the run's end, as an echo of its restart.
func MayBeFinishing(step string) bool {
	last := ""
	for _, s := range stepTable() {
		if s.findable() {
			last = s.step
		}
	}
	return step != "" && (step == last || step == StepRestart)
}

// row is a step run as one activity with its own retries.
func row(step string, activity any, k kind, attempts int32, timeout time.Duration, summary string) stepSpec {
	// The heartbeat timeout finds a dead worker's steps fast: activities beat every 2 s once
	// they have run that long (activities.HeartbeatEvery).
	return stepSpec{step: step, activity: activity, kind: k, summary: summary, options: workflow.ActivityOptions{
		StartToCloseTimeout: timeout, HeartbeatTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 10 * time.Second, MaximumAttempts: attempts,
			NonRetryableErrorTypes: activities.NonRetryableErrorTypes()},
	}}
}

// execute starts one run of the step's activity: local for a computation and, in fast mode,
// for every step that neither acts on the host nor goes to the helper task queue (a local
// activity cannot run on another queue).
func (p *provisioner) execute(ctx workflow.Context, spec stepSpec, arg any) workflow.Future {
	opts := spec.options
	opts.Summary = spec.summary
	queued := spec.kind == kindDecide && p.policy.HelperQueue
	if queued {
		opts.TaskQueue = HelperTaskQueue(workflow.GetInfo(ctx).TaskQueueName)
	}
	if spec.kind == kindSign || (p.policy.Fast && !queued && spec.kind != kindEffect) {
		lopts := workflow.LocalActivityOptions{StartToCloseTimeout: opts.StartToCloseTimeout, RetryPolicy: opts.RetryPolicy,
			ScheduleToCloseTimeout: max(localScheduleToClose, opts.StartToCloseTimeout), Summary: spec.summary}
		fn := spec.activity
		if spec.kind == kindSign && p.signer != nil {
			fn = p.signer.SignServerJWT // the worker's own signer: never a task on the queue
		}
		return workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lopts), fn, arg)
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), spec.activity, arg)
}
