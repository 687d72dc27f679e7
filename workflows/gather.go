package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// read is one of the independent reads of a pass and where its result goes.
type read struct {
	step   string
	result any
}

// gatherTogether schedules the reads in one workflow task, so that a host's reads cost one
// task between them instead of one each, and waits for all of them.
func (p *provisioner) gatherTogether(ctx workflow.Context) (*facts, error) {
	f := &facts{helper: activities.HelperRequest{Input: activities.HelperInput{Identity: p.in.Identity}}}
	var ed activities.ED25519Result
	var reads []read
	if p.in.Features.JWT {
		reads = append(reads, read{StepJWT, &f.jwt})
	}
	if p.in.Features.ED25519 {
		reads = append(reads, read{StepGen25519, &ed})
	}
	if p.in.Features.PKI {
		f.csr = &activities.CSRResult{}
		reads = append(reads, read{StepGencsr, f.csr})
	}
	reads = append(reads, read{StepInventory, &f.inventory})
	if err := p.readAll(ctx, reads); err != nil {
		return nil, err
	}
	if p.in.Features.JWT {
		f.helper.Input.JWT, f.helper.HadToken = f.jwt.Claims, f.jwt.HadToken
	}
	if p.in.Features.ED25519 {
		ed.Attempted = activities.Attempted{} // the helper contract's keys only
		f.helper.Input.ED25519PubKey = &ed
	}
	if f.csr != nil {
		csr := *f.csr
		csr.Attempted = activities.Attempted{}
		f.helper.Input.CSR = &csr
	}
	f.helper.Input.Inventory = f.inventory.Inventory
	p.status.ServerVersion = f.inventory.Version
	return f, nil
}

// readAll runs the reads at once (each with its activity's own retries) and returns the error
// of the first that failed, in the order given. Each is its own entry in the timeline.
func (p *provisioner) readAll(ctx workflow.Context, reads []read) error {
	if err := workflow.Await(ctx, func() bool { return !p.status.Paused }); err != nil {
		return err
	}
	host := p.host() // the run's first reads all carry the sighting time
	errs := make([]error, len(reads))
	sel := workflow.NewSelector(ctx)
	for i, r := range reads {
		p.stepRuns++
		p.status.Step, p.status.Attempt = r.step, 1
		p.status.Timeline = append(p.status.Timeline, StepRecord{Step: r.step, Started: workflow.Now(ctx)})
		at := len(p.status.Timeline) - 1
		sel.AddFuture(p.execute(ctx, specOf(r.step), host), func(fut workflow.Future) {
			errs[i] = p.record(&p.status.Timeline[at], fut.Get(ctx, r.result), r.result, workflow.Now(ctx))
		})
	}
	for range reads {
		sel.Select(ctx)
	}
	for i, err := range errs {
		if err != nil {
			p.status.Step = reads[i].step // where it failed
			p.firstReadsFailed = !host.SeenAt.IsZero()
			return &stepError{step: reads[i].step, err: err}
		}
	}
	return nil
}
