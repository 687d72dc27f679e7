package discovery

import (
	"context"
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/workflows"
)

// start hands a sighting to Temporal: a new run of the host's workflow, or nothing when one is
// open (a signal would cost the open run a history event and a workflow task, and tell it
// nothing). It is the one place discovery starts a run, with the start options every starter
// shares (hostruns.Starter.Options).
func (d *Discoverer) start(ctx context.Context, identity, source string, seenAt time.Time) error {
	return d.startWith(ctx, identity, source, seenAt, enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED)
}

// startWith is start with another conflict policy than the starter's (unspecified: the
// starter's): TerminateExisting replaces a workflow a provisioner did not start (judged by
// check), whatever holds the ID by the time the start reaches Temporal.
func (d *Discoverer) startWith(ctx context.Context, identity, source string, seenAt time.Time, conflict enumspb.WorkflowIdConflictPolicy) error {
	in := workflows.ProvisionInput{Identity: identity, Source: source, SeenAt: seenAt}
	opts := d.opts.Start.Options(in)
	opts.EnableEagerStart = d.eagerStart(source)
	if conflict != enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED {
		opts.WorkflowIDConflictPolicy = conflict
	}
	_, err := d.starter.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, in)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			d.log.Error("could not start workflow", zap.String(logging.FieldIdentity, identity), zap.Error(err))
		}
		return err
	}
	// counted as the Choria Provisioner counted hosts added to its work list: a sighting that
	// a run at work absorbs (a sweep's of an open run) or that is stale is not
	switch source {
	case workflows.SourceDiscovery:
		d.metrics.Discovered.WithLabelValues(d.metrics.Site).Inc()
	case workflows.SourceEvent:
		d.metrics.EventDiscovered.WithLabelValues(d.metrics.Site).Inc()
	}
	d.log.Debug("sighting handed to Temporal", zap.String(logging.FieldIdentity, identity), zap.String("source", source))
	return nil
}

// eagerStart says whether a run starts with its first workflow task handed to this process's
// worker in the start's response (when it has a free slot), skipping a dispatch through
// Temporal's matching service and a history write: only for a startup event that arrived alone.
// Hosts found together (a sweep, a burst of events) start through the task queue, which then
// paces them: started eagerly, the 10,000 hosts of a burst were all at work in this process at
// once, its memory five times as large and its first minute's rate a tenth (docs/performance.md).
func (d *Discoverer) eagerStart(source string) bool {
	return source == workflows.SourceEvent && d.queued.Load() == 0
}
