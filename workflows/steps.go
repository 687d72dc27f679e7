package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// stepSpec is everything the workflow decides about one step. A new step is a row here, a
// method on activities.Activities, and a call in the sequence (docs/architecture.md).
type stepSpec struct {
	activity any                      // the activity, by method value: its name is the method's
	options  workflow.ActivityOptions // timeouts and the activity's own retries
	// attempts is how many times the workflow itself runs the activity: more than one for the
	// helper, so that every failure is its own ActivityTaskFailed event with its reason
	attempts int
	// local: may run as a local activity (temporal.local_activities): cheap, and safe to repeat
	// if a worker dies before the workflow task that records it completes
	local bool
	// findable: upserts ProvisionStep when it starts, also in transitions-only runs (a host can
	// spend minutes in the helper: a slow CMDB or CA)
	findable bool
	// rateLimited: runs on the helper task queue when one is configured, unless the process
	// completing the run's task can start it at once (helperHere); with helper_rate_limit always
	rateLimited bool
	// pure: neither an RPC nor the helper, a computation: a local activity from VersionLean on
	pure bool
}

// localScheduleToClose bounds a local step with all its retries (five tries of at most the RPC
// timeout, with backoff).
const localScheduleToClose = 3 * time.Minute

// specOf is the step's row. Budgets follow the Choria Provisioner's (jwt 3, gen25519 5,
// inventory 5, configure 5, restart 3, shutdown 3) with more room where a failure is likely
// transient, and backoff so a flapping host does not spin. A row is built when a step runs, not
// held by the run: a run stays in the worker's cache between its tasks, at scale thousands of
// them, and a table each was ~3.6 kB of their ~80 kB (docs/performance.md).
func specOf(step string) stepSpec {
	var a *activities.Activities // method values name the activities; the worker's are called
	switch step {
	case StepJWT:
		return local(row(a.FetchJWT, 5, time.Minute))
	case StepGen25519:
		return local(row(a.Gen25519, 5, time.Minute))
	case StepInventory:
		return local(row(a.Inventory, 5, time.Minute))
	case StepGencsr:
		return row(a.Gencsr, 2, time.Minute) // the Choria Provisioner tried once; a new key per attempt is cheap
	case StepHelper:
		helper := row(a.RunHelper, 1, 5*time.Minute) // helper_timeout bounds the helper; this a stuck worker
		helper.attempts, helper.findable, helper.rateLimited = 5, true, true
		return helper
	case StepSign:
		s := local(row(a.SignServerJWT, 2, 30*time.Second))
		s.pure = true
		return s
	case StepConfigure:
		return row(a.Configure, 5, time.Minute)
	case StepRestart:
		return row(a.Restart, 3, time.Minute)
	case StepUpgrade:
		return row(a.ReleaseUpdate, 3, 2*time.Minute) // as the Choria Provisioner
	case StepShutdown:
		return row(a.Shutdown, 2, time.Minute) // a host told to shut down is often gone before a third try
	}
	panic("workflows: no row for step " + step) // a step constant without a row: a programming error
}

// row is a step run as one activity with its own retries.
func row(activity any, attempts int32, timeout time.Duration) stepSpec {
	// The heartbeat timeout finds a dead worker's steps fast: activities beat every 2 s once
	// they have run that long (activities.HeartbeatEvery).
	return stepSpec{activity: activity, attempts: 1, options: workflow.ActivityOptions{
		StartToCloseTimeout: timeout, HeartbeatTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: 10 * time.Second, MaximumAttempts: attempts,
			NonRetryableErrorTypes: activities.NonRetryableErrorTypes()},
	}}
}

func local(s stepSpec) stepSpec { s.local = true; return s }

// execute starts one run of the step's activity, local or regular as the run allows.
func (p *provisioner) execute(ctx workflow.Context, spec stepSpec, arg any) workflow.Future {
	opts := spec.options
	queued := spec.rateLimited && p.in.HelperTaskQueue != ""
	if queued && !p.helperHere(ctx) {
		opts.TaskQueue = p.in.HelperTaskQueue // whichever process has room (and helper_rate_limit)
	}
	// a local activity cannot run on another task queue: a rate-limited helper stays regular
	if (p.localReads && spec.local) || (p.lean() && spec.pure) || (p.fast && !queued) {
		lopts := workflow.LocalActivityOptions{StartToCloseTimeout: opts.StartToCloseTimeout, RetryPolicy: opts.RetryPolicy,
			ScheduleToCloseTimeout: max(localScheduleToClose, opts.StartToCloseTimeout)}
		return workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lopts), spec.activity, arg)
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), spec.activity, arg)
}

// helperHere says whether this run's helper call stays on the run's own task queue, where the
// workflow task's completion hands it straight back to this worker (an eager activity): only
// while this process has a helper slot free. Otherwise it goes to the helper task queue, for
// whichever process has room. Each way saves the other's cost: the helper queue's dispatch
// through matching, and its start write (5 % of Temporal's CPU per host, docs/performance.md),
// against helpers waiting in this worker's step slots for a busy helper.
//
// This reads the process, not the history, and is safe in workflow code for one reason: replay
// matches a ScheduleActivityTask command to its event by activity ID and type alone, never by
// task queue (the SDK's isCommandMatchEvent), so a replay that chooses the other queue issues
// the same commands. The choice changes nothing else in the run. A replay asks no process.
func (p *provisioner) helperHere(ctx workflow.Context) bool {
	return p.helpers != nil && !workflow.IsReplaying(ctx) && p.helpers.HelperSlotFree()
}
