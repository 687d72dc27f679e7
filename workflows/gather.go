package workflows

import (
	"errors"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
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
	for _, r := range reads {
		f.replies = append(f.replies, r.result.(interface{ GetReply() activities.Seal }).GetReply())
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
// of the first that failed, in the order given; each is its own entry in the timeline. Until the
// host has answered in this run, each read has unansweredAttempts tries: a name that never
// answers (a forged sighting, a host gone) fails its run after those; a host that answered one
// read gets the rest of its row's tries for the others, and a failure of ours (RPCError: the
// broker) the rest too.
func (p *provisioner) readAll(ctx workflow.Context, reads []read) error {
	if err := p.awaitResume(ctx); err != nil {
		return err
	}
	p.details(ctx, "reading the server: "+stepNames(reads))
	host := p.host()
	p.passes++
	probe := !p.answered
	errs := p.readOnce(ctx, reads, host, probe, 0)
	if probe {
		var again []read
		var at []int
		for i, err := range errs {
			if err != nil && activities.Retryable(err) && (p.answered || !activities.IsNoReply(err)) {
				again, at = append(again, reads[i]), append(at, i)
			}
		}
		if len(again) > 0 {
			for j, err := range p.readOnce(ctx, again, host, false, unansweredAttempts) {
				errs[at[j]] = err
			}
		}
	}
	return p.firstFailure(reads, errs, !host.SeenAt.IsZero())
}

// firstFailure is the error of the first read that failed, in the order given, unless one says
// the host left provisioning mode since the sighting (sighted: the reads carried its time):
// only the inventory read checks, and its verdict ends the run whatever the others' silence.
func (p *provisioner) firstFailure(reads []read, errs []error, sighted bool) error {
	first := slices.IndexFunc(errs, notProvisioning)
	if first < 0 {
		first = slices.IndexFunc(errs, func(err error) bool { return err != nil })
	}
	if first < 0 {
		return nil
	}
	p.status.Step = reads[first].step // where it failed
	return &stepError{step: reads[first].step, err: errs[first], stale: sighted && notProvisioning(errs[first])}
}

// unansweredAttempts is how many tries each read has while the host has not answered in this
// run. A forged name's run then costs its reads this many RPC timeouts each (2 x 10 s, not 5),
// and, with the stale check on the inventory read only, 2 visibility queries, not 15.
const unansweredAttempts = 2

// readOnce runs reads at once: with unansweredAttempts tries each when probe, else with their
// row's tries less spent.
func (p *provisioner) readOnce(ctx workflow.Context, reads []read, host activities.HostInput, probe bool, spent int32) []error {
	errs := make([]error, len(reads))
	sel := workflow.NewSelector(ctx)
	pending := len(reads)
	for i, r := range reads {
		p.status.Step, p.status.Attempt = r.step, 1
		spec := specOf(r.step)
		rp := *spec.options.RetryPolicy
		if probe {
			rp.MaximumAttempts = min(rp.MaximumAttempts, unansweredAttempts)
		} else {
			rp.MaximumAttempts = max(rp.MaximumAttempts-spent, 1)
		}
		spec.options.RetryPolicy = &rp
		in := host
		if r.step != StepInventory {
			in.SeenAt = time.Time{} // one read per run makes the stale check (a visibility query)
		}
		at := p.begin(ctx, r.step)
		p.ask(ctx, sel, r.step, spec, in, r.result, func(err error) {
			pending--
			errs[i] = p.record(at, err, r.result, workflow.Now(ctx))
			p.answered = p.answered || hostAnswered(errs[i])
		})
	}
	for pending > 0 {
		sel.Select(ctx)
	}
	return errs
}

// hostAnswered says whether a read's outcome came from the host: a result, or an error the host
// replied with; not its silence, nor a failure of ours to send the request.
func hostAnswered(err error) bool {
	var app *temporal.ApplicationError
	if err == nil {
		return true
	}
	if !errors.As(err, &app) {
		return false
	}
	switch app.Type() {
	case activities.ErrTypeNoReply, activities.ErrTypeRPC, activities.ErrTypeNotProvisioning, activities.ErrTypeUntrusted, activities.ErrTypeOtherRun:
		return false
	}
	return true
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
