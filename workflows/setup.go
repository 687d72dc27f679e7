package workflows

import (
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/workflow"
)

// lean is true for runs of VersionLean and later: no GetVersion markers.
func (p *provisioner) lean() bool { return p.version >= VersionLean }

// versionOf is the command sequence this run follows: the input's, unless a worker that did not
// know the field began the run (a rolling upgrade) and wrote its markers, which the replay finds.
// Outside replay it asks nothing, and in replay GetVersion issues no command: a run's commands
// never depend on it.
func versionOf(ctx workflow.Context, in ProvisionInput) int {
	if in.Version >= VersionLean && workflow.IsReplaying(ctx) &&
		workflow.GetVersion(ctx, transitionsOnlyChange, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
		return VersionMarkers
	}
	return in.Version
}

// setup installs the status query and the signal handlers, and reads which workflow changes
// this run's history was written with.
func (p *provisioner) setup(ctx workflow.Context) error {
	p.log = log.With(workflow.GetLogger(ctx), "identity", p.in.Identity, "site", p.in.Site)
	p.status = Status{Identity: p.in.Identity, Site: p.in.Site, Outcome: OutcomeRunning, Defers: p.in.Defers, Sightings: 1}

	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (Status, error) { return p.status, nil }); err != nil {
		return err
	}
	p.handleSignals(ctx)

	p.version = versionOf(ctx, p.in)
	if p.lean() {
		p.transitionsOnly, p.localReads, p.fast = true, p.in.LocalReads, p.in.Fast
	} else {
		p.transitionsOnly = workflow.GetVersion(ctx, transitionsOnlyChange, workflow.DefaultVersion, 1) >= 1
		p.localReads = p.in.LocalReads && workflow.GetVersion(ctx, localReadsChange, workflow.DefaultVersion, 1) >= 1
	}
	if p.transitionsOnly {
		// starters set these (StartSearchAttributes); a run started without them still gets them
		if id, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(IdentityKey); ok && id == p.in.Identity {
			return nil
		}
	}
	return p.upsert(ctx, IdentityKey.ValueSet(p.in.Identity), SiteKey.ValueSet(p.in.Site), OutcomeKey.ValueSet(OutcomeRunning))
}

// handleSignals keeps the pause state and the sightings of the host in the status, in one
// coroutine: each is a goroutine with its own stack for as long as the run is in the worker's
// cache, and at scale thousands of runs are.
func (p *provisioner) handleSignals(ctx workflow.Context) {
	pause := workflow.GetSignalChannel(ctx, PauseSignal)
	resume := workflow.GetSignalChannel(ctx, ResumeSignal)
	seen := workflow.GetSignalChannel(ctx, SeenSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); p.status.Paused = true })
		sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); p.status.Paused = false })
		sel.AddReceive(seen, func(c workflow.ReceiveChannel, _ bool) {
			var s Sighting
			c.Receive(ctx, &s)
			p.status.Sightings++
			p.status.LastSeen = s.At
		})
		for ctx.Err() == nil {
			sel.Select(ctx)
		}
	})
}
