package discovery

import (
	"context"
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// Sighted starts the host's workflow unless its latest run says the sighting needs none; seenAt
// is when the host was seen (for a sweep, when the sweep began).
func (d *Discoverer) Sighted(ctx context.Context, identity, source string, seenAt time.Time) error {
	_, err := d.sighted(ctx, identity, source, seenAt)
	return err
}

// sighted reports whether the sighting was handed to Temporal now.
func (d *Discoverer) sighted(ctx context.Context, identity, source string, seenAt time.Time) (bool, error) {
	// A sweep's sightings are older than the moment they reach Temporal, and a sweep over
	// thousands of hosts hands them over for many seconds while the hosts it found are being
	// provisioned and restarted: check each against the host's latest run first; likewise a
	// startup event that waited in the queue.
	if source == workflows.SourceDiscovery || d.now().Sub(seenAt) > LateEvent {
		switch d.check(ctx, identity, seenAt) {
		case staleSeen:
			d.dropStale(identity)
			return false, nil
		case unjudged:
			d.gate.refuse(metrics.RefusedUnjudged, "", nil)
			return false, nil
		case finishing:
			d.settleLater(ctx, sighting{identity: identity, source: source, at: seenAt})
			return false, nil
		case openRun:
			if source == workflows.SourceDiscovery {
				return false, nil
			}
		case takeOver:
			return true, d.startWith(ctx, identity, source, seenAt, enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING)
		}
	}
	return true, d.start(ctx, identity, source, seenAt)
}

// verdict is what a sighting needs, given the host's latest run.
type verdict int

const (
	startRun  verdict = iota // no run, or a closed one the sighting is newer than: start as usual
	openRun                  // a run is at work on the host and absorbs the sighting
	finishing                // a run past its restart RPC (or between steps): judge once it has closed
	staleSeen                // the host left provisioning mode after the sighting: drop it
	takeOver                 // a workflow not ours holds the host's ID: start the host's run in its place
	unjudged                 // Temporal could not say: refuse it, for a sweep Temporal can judge
)

// check reads the host's latest run from the history service (not the rate-limited visibility
// store) and judges a sighting made at seenAt against it.
//
// A sighting Temporal cannot judge is not started: a sweep's sighting in a partition from Temporal
// made just after a run restarted its host (the server answers in provisioning mode for seconds
// more) was started as usual, the start reached Temporal when the partition healed, and the run
// failed at its first RPC to a host long provisioned (TestIntegrationFaultSoak, 5 hosts a 30 s
// cut). A refusal brings the next sweep forward, which finds the host if it still waits.
func (d *Discoverer) check(ctx context.Context, identity string, seenAt time.Time) verdict {
	if d.now().UnixNano() < d.unjudgedUntil.Load() {
		return unjudged
	}
	dctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	resp, err := d.starter.DescribeWorkflowExecution(dctx, workflows.WorkflowID(identity), "")
	var none *serviceerror.NotFound
	switch {
	case errors.As(err, &none):
		return startRun
	case err != nil:
		if ctx.Err() == nil {
			d.unjudgedUntil.Store(d.now().Add(CheckTimeout).UnixNano())
			d.log.Warn("Temporal could not say whether a sighted host was provisioned since; refusing sightings for a while, the next sweep finds the hosts that still wait",
				zap.String(logging.FieldIdentity, identity), zap.Duration("for", CheckTimeout), zap.Error(err))
		}
		return unjudged
	}
	info := resp.GetWorkflowExecutionInfo()
	if run := hostruns.Decode(info); !run.Ours(d.opts.Start.TaskQueue) {
		return d.squatted(identity, run)
	}
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		// a run past its restart RPC, waiting for its last workflow task, has no activity pending
		// and will not serve this sighting; one with an activity pending, deferred, or not yet at
		// its helper will
		if len(resp.GetPendingActivities()) == 0 && mayBeFinishing(hostruns.Decode(info)) {
			return finishing
		}
		return openRun
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return d.checkCompleted(ctx, identity, info, seenAt)
	}
	return startRun
}

// checkCompleted judges a sighting against a completed latest run. The run makes the sighting
// stale only if the host could still have answered in provisioning mode from that run when the
// sighting was made: the run's result says when its restart RPC succeeded
// (ProvisionResult.LeftProvisioningBy). Judging by the close time instead goes wrong when a
// provisioner stops right after a run's restart RPC: the run closes only when a provisioner comes
// back and runs its last workflow task, after that provisioner's first sweep began, and every
// host seen in that sweep would wait a whole interval.
func (d *Discoverer) checkCompleted(ctx context.Context, identity string, info *workflowpb.WorkflowExecutionInfo, seenAt time.Time) verdict {
	// a run closes at its restart RPC and leaves the server answering in provisioning mode for up
	// to splay+2 s more: a sweep begun in that window is an echo
	if !info.GetCloseTime().AsTime().Add(workflows.RestartWindow(0)).After(seenAt) {
		return startRun
	}
	var res workflows.ProvisionResult
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.starter.GetWorkflow(rctx, workflows.WorkflowID(identity), info.GetExecution().GetRunId()).Get(rctx, &res); err != nil {
		d.log.Warn("could not read the latest run's result, judging the sighting by the run's close time",
			zap.String(logging.FieldIdentity, identity), zap.Error(err))
		return staleSeen
	}
	if left := res.LeftProvisioningBy(); !left.IsZero() && left.Before(seenAt) {
		return startRun // the host is back in provisioning mode since that run restarted it
	}
	return staleSeen
}

// mayBeFinishing says whether an open run may be past its restart RPC, by its search attributes:
// at the last step it makes findable or later (workflows.MayBeFinishing), and not deferred.
func mayBeFinishing(r hostruns.Run) bool {
	return r.Outcome != workflows.OutcomeDeferred && workflows.MayBeFinishing(r.Step)
}

// squatted judges a sighting whose host's workflow ID holds a run a provisioner did not start
// (another workflow type or task queue: any namespace client may start one under the ID). It is
// no run of the host's: a closed one is passed over, an open one is replaced by the host's run.
func (d *Discoverer) squatted(identity string, r hostruns.Run) verdict {
	if !r.Running() {
		return startRun
	}
	d.log.Warn("a workflow a provisioner did not start holds the host's workflow ID; the host's run replaces it",
		zap.String(logging.FieldIdentity, identity), zap.String("workflow_type", r.Type), zap.String("task_queue", r.TaskQueue))
	return takeOver
}

// dropStale drops a sighting made while the host's last restart may still have been under way,
// and asks for the next sweep sooner (loop): by then (RefusedSweepAfter, longer than the default
// restart window) an echo no longer answers in provisioning mode, while a host re-imaged that soon
// after its restart does, and waits seconds instead of an interval.
func (d *Discoverer) dropStale(identity string) {
	d.log.Debug("stale sighting of a host provisioned since, dropped", zap.String(logging.FieldIdentity, identity))
	d.metrics.StaleSightings.WithLabelValues(d.metrics.Site).Inc()
	nudge(d.stale)
}
