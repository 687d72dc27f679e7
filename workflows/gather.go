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

// gather runs the reads the helper decides on (jwt, gen25519, gencsr, inventory, as the
// policy's features ask) at once, in one workflow task, and hands their results to the helper's
// request in the shape the helper contract wants.
func (p *provisioner) gather(ctx workflow.Context) (*facts, error) {
	f := &facts{helper: activities.HelperRequest{Input: activities.HelperInput{Identity: p.in.Identity}}}
	features := p.policy.Features
	var ed activities.ED25519Result
	var reads []read
	if features.JWT {
		reads = append(reads, read{StepJWT, &f.jwt})
	}
	if features.ED25519 {
		reads = append(reads, read{StepGen25519, &ed})
	}
	if features.PKI {
		f.csr = &activities.CSRResult{}
		reads = append(reads, read{StepGencsr, f.csr})
	}
	reads = append(reads, read{StepInventory, &f.inventory})
	if err := p.readAll(ctx, reads); err != nil {
		return nil, err
	}
	if features.JWT {
		f.helper.Input.JWT, f.helper.HadToken = f.jwt.Claims, f.jwt.HadToken
	}
	if features.ED25519 {
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
	if err := p.awaitResume(ctx); err != nil {
		return err
	}
	p.details(ctx, "reading the server: "+stepNames(reads))
	host := p.host()
	p.passes++
	errs := make([]error, len(reads))
	sel := workflow.NewSelector(ctx)
	for i, r := range reads {
		p.status.Step, p.status.Attempt = r.step, 1
		at := p.begin(ctx, r.step)
		sel.AddFuture(p.execute(ctx, specOf(r.step), host), func(fut workflow.Future) {
			errs[i] = p.record(at, fut.Get(ctx, r.result), r.result, workflow.Now(ctx))
		})
	}
	for range reads {
		sel.Select(ctx)
	}
	for i, err := range errs {
		if err != nil {
			p.status.Step = reads[i].step // where it failed
			return &stepError{step: reads[i].step, err: err, stale: !host.SeenAt.IsZero() && notProvisioning(err)}
		}
	}
	return nil
}

// host addresses the host; the first pass's reads carry the sighting time, so that a host that
// does not answer because it was provisioned after that sighting is recognised
// (activities.RunHistory).
func (p *provisioner) host() activities.HostInput {
	if p.passes == 0 {
		return activities.HostInput{Identity: p.in.Identity, SeenAt: p.in.SeenAt}
	}
	return activities.HostInput{Identity: p.in.Identity}
}

func stepNames(reads []read) string {
	s := ""
	for i, r := range reads {
		if i > 0 {
			s += ", "
		}
		s += r.step
	}
	return s
}
