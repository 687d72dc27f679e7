package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// stepSpec is everything the workflow decides about one step: the one row a step has. A new
// step is a row here, a method on activities.Activities (with its row in that package's
// registrations), and a call in the sequence (docs/architecture.md).
type stepSpec struct {
	activity any                      // the activity, by method value: its name is the method's
	options  workflow.ActivityOptions // timeouts and the activity's own retries
	summary  string                   // what the step does, beside it in the Web UI
	// attempts is how many times the workflow itself runs the activity: more than one for the
	// helper, so that every failure is its own ActivityTaskFailed event with its reason
	attempts int
	// findable: upserts ProvisionStep when it starts (a host can spend minutes in the helper:
	// a slow CMDB or CA); the other steps are in the status query only
	findable bool
	// helper: goes to the helper task queue when the policy says so (helper_rate_limit)
	helper bool
	// local: a computation, neither an RPC nor the helper: always a local activity
	local bool
	// signs: the sign step, run by the worker's own signer (HostWorkflow.Signer)
	signs bool
	// effect: acts on the host with what the run decided (its key, its signed JWT): a regular
	// activity in fast mode too, so that everything it depends on is recorded before it runs and
	// a crash cannot make the run decide again and configure the host twice, differently
	effect bool
}

// localScheduleToClose bounds a local step with all its retries (five tries of at most the RPC
// timeout, with backoff).
const localScheduleToClose = 3 * time.Minute

// specOf is the step's row. Budgets follow the Choria Provisioner's (jwt 3, gen25519 5,
// inventory 5, configure 5, restart 3, shutdown 3) with more room where a failure is likely
// transient, and backoff so a flapping host does not spin. A row is built when a step runs, not
// held by the run: a run stays in the worker's cache between its tasks, at scale thousands of
// them (docs/performance.md).
func specOf(step string) stepSpec {
	var a *activities.Activities // method values name the activities; the worker's are called
	switch step {
	case StepJWT:
		return row(a.FetchJWT, 5, time.Minute, "fetch and verify the provisioning JWT")
	case StepGen25519:
		return row(a.Gen25519, 5, time.Minute, "have the server make an ed25519 key and prove it")
	case StepInventory:
		return row(a.Inventory, 5, time.Minute, "read the server's inventory")
	case StepGencsr:
		// the Choria Provisioner tried once; a new key per attempt is cheap
		return row(a.Gencsr, 2, time.Minute, "have the server make a key and CSR")
	case StepHelper:
		// helper_timeout bounds the helper; this a stuck worker
		s := row(a.RunHelper, 1, 5*time.Minute, "waiting for the site's helper to decide the configuration")
		s.attempts, s.findable, s.helper = 5, true, true
		return s
	case StepSign:
		s := row(a.SignServerJWT, 2, 30*time.Second, "sign the server's JWT")
		s.local, s.signs = true, true
		return s
	case StepConfigure:
		s := row(a.Configure, 5, time.Minute, "send the configuration")
		s.effect = true
		return s
	case StepRestart:
		// five, not the original's three: a broker restart (the client back after ~4 s) must not
		// fail a configured host and have it provisioned again (TestIntegrationFaultCompound)
		return row(a.Restart, 5, time.Minute, "restart the server into its configuration")
	case StepUpgrade:
		return row(a.ReleaseUpdate, 3, 2*time.Minute, "upgrade the server to the helper's version") // as the Choria Provisioner
	case StepShutdown:
		// a host told to shut down is often gone before a third try
		return row(a.Shutdown, 2, time.Minute, "shut the server down at the helper's request")
	}
	panic("workflows: no row for step " + step) // a step constant without a row: a programming error
}

// row is a step run as one activity with its own retries.
func row(activity any, attempts int32, timeout time.Duration, summary string) stepSpec {
	// The heartbeat timeout finds a dead worker's steps fast: activities beat every 2 s once
	// they have run that long (activities.HeartbeatEvery).
	return stepSpec{activity: activity, attempts: 1, summary: summary, options: workflow.ActivityOptions{
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
	queued := spec.helper && p.policy.HelperQueue
	if queued {
		opts.TaskQueue = HelperTaskQueue(workflow.GetInfo(ctx).TaskQueueName)
	}
	if spec.local || (p.policy.Fast && !queued && !spec.effect) {
		lopts := workflow.LocalActivityOptions{StartToCloseTimeout: opts.StartToCloseTimeout, RetryPolicy: opts.RetryPolicy,
			ScheduleToCloseTimeout: max(localScheduleToClose, opts.StartToCloseTimeout), Summary: spec.summary}
		fn := spec.activity
		if spec.signs && p.signer != nil {
			fn = p.signer.SignServerJWT // the worker's own signer: never a task on the queue
		}
		return workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lopts), fn, arg)
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), spec.activity, arg)
}
