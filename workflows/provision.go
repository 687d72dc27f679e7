package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// Workflow changes guarded by workflow.GetVersion, so histories recorded before them replay.
const (
	restartGraceChange  = "restart-grace"
	restartGraceSeconds = 3
	upgradeRestartWait  = 4 * time.Second

	shutdownUnconfirmedChange = "shutdown-unconfirmed"

	// From this change a run upserts search attributes at transitions only (helper running,
	// deferred, failed at a step, done) instead of at every step: each upsert is a history
	// event and a visibility write, and the Temporal server's CPU bounds throughput
	// (docs/performance.md). The current step is always in the status query.
	transitionsOnlyChange = "search-attributes-at-transitions"

	// local reads (temporal.local_activities) guarded too: a run whose input asks for them but
	// whose history was written by a worker that did not know the switch replays as regular
	localReadsChange = "local-reads"
)

// provisioner is one run of a host's workflow: its input, what the status query shows, and the
// switches its history fixed.
type provisioner struct {
	in     ProvisionInput
	status Status
	log    log.Logger
	// transitionsOnly: upsert ProvisionStep only for the helper, a defer, a failure and the end
	transitionsOnly bool
	// localReads: the steps marked local in the step table run as local activities
	localReads bool
	// fast: every step runs as a local activity (lean runs only)
	fast bool
	// firstReadsFailed: a read that carried the sighting time failed (lean runs' stale check)
	firstReadsFailed bool
	// version is the command sequence this run follows (versionOf)
	version int
	// stepRuns counts the activity runs of this run: the first carries the sighting time
	stepRuns int
	// restartedAt: when the restart RPC succeeded (the result carries it for discovery)
	restartedAt time.Time
	// helpers: the helper slots of the worker process running this task (nil: none to use)
	helpers HelperSlots
}

// outcome is what one pass over the steps decided.
type outcome struct {
	decision string // DecisionConfigure, DecisionDefer or DecisionShutdown
	msg      string // the helper's message
	again    bool   // the server was upgraded and restarted: run the steps again
}

// facts is what the reads of a pass gathered for the helper and the configure step.
type facts struct {
	helper    activities.HelperRequest
	jwt       activities.JWTResult
	inventory activities.InventoryResult
	csr       *activities.CSRResult
}

// ProvisionHost provisions one Choria Server: jwt -> gen25519 -> inventory -> helper -> sign ->
// configure -> restart, each an activity with its own retry policy. A helper defer waits on a
// durable timer and runs the steps again; a helper shutdown shuts the server down and ends.
// Registered this way (replayers, tests), every helper call goes to the helper task queue;
// a worker process registers HostWorkflow.ProvisionHost with its helper slots.
func ProvisionHost(ctx workflow.Context, in ProvisionInput) (*ProvisionResult, error) {
	return HostWorkflow{}.ProvisionHost(ctx, in)
}

// ProvisionHost is the workflow as a worker process runs it (see the package-level ProvisionHost).
func (h HostWorkflow) ProvisionHost(ctx workflow.Context, in ProvisionInput) (*ProvisionResult, error) {
	if err := ValidateIdentity(in.Identity); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeProvisionFailed, err)
	}
	p := &provisioner{in: withDefaults(in), helpers: h.Helpers}
	if err := p.setup(ctx); err != nil {
		return nil, err
	}
	return p.run(ctx)
}

func withDefaults(in ProvisionInput) ProvisionInput {
	if in.DeferDelay <= 0 {
		in.DeferDelay = DefaultDeferDelay
	}
	if in.MaxDefers <= 0 {
		in.MaxDefers = DefaultMaxDefers
	}
	if in.RestartSplay <= 0 {
		in.RestartSplay = DefaultRestartSplay
	}
	return in
}

// run is the host's life: passes over the steps until the helper's decision ends it.
func (p *provisioner) run(ctx workflow.Context) (*ProvisionResult, error) {
	for {
		out, err := p.pass(ctx)
		switch {
		case err != nil && p.stale(err):
			return p.finish(ctx, OutcomeProvisioned, "no longer in provisioning mode: a stale sighting of a provisioned server")
		case err != nil:
			return nil, p.fail(ctx, err)
		case out.again:
			continue
		case out.decision == DecisionShutdown:
			return p.finish(ctx, OutcomeShutdown, "shut down at the helper's request: "+out.msg)
		case out.decision == DecisionDefer:
			if err := p.deferHost(ctx, out.msg); err != nil {
				return nil, err
			}
		default:
			return p.finish(ctx, OutcomeProvisioned, "provisioned")
		}
	}
}

// pass runs the steps once: gather, ask the helper, then act on its decision.
func (p *provisioner) pass(ctx workflow.Context) (outcome, error) {
	f, err := p.gather(ctx)
	if err != nil {
		return outcome{}, err
	}
	d, err := p.askHelper(ctx, f)
	switch {
	case err != nil:
		return outcome{}, err
	case d.Shutdown:
		return p.shutdown(ctx, d.Msg)
	case d.Defer:
		return outcome{decision: DecisionDefer, msg: d.Msg}, nil
	}
	if again, err := p.upgrade(ctx, d.Upgrade, &f.inventory); again || err != nil {
		return outcome{again: true}, err
	}
	return outcome{decision: DecisionConfigure}, p.configure(ctx, f, d)
}

// gather runs the reads the helper decides on: jwt, gen25519, inventory, gencsr; one after the
// other in runs before VersionLean.
func (p *provisioner) gather(ctx workflow.Context) (*facts, error) {
	if p.lean() {
		return p.gatherTogether(ctx)
	}
	f := &facts{helper: activities.HelperRequest{Input: activities.HelperInput{Identity: p.in.Identity}}}
	if p.in.Features.JWT {
		if err := p.step(ctx, StepJWT, p.host(), &f.jwt); err != nil {
			return nil, err
		}
		f.helper.Input.JWT, f.helper.HadToken = f.jwt.Claims, f.jwt.HadToken
	}
	if p.in.Features.ED25519 {
		var ed activities.ED25519Result
		if err := p.step(ctx, StepGen25519, p.host(), &ed); err != nil {
			return nil, err
		}
		ed.Attempted = activities.Attempted{} // the helper contract's keys only
		f.helper.Input.ED25519PubKey = &ed
	}
	if err := p.step(ctx, StepInventory, p.host(), &f.inventory); err != nil {
		return nil, err
	}
	f.helper.Input.Inventory = f.inventory.Inventory
	p.status.ServerVersion = f.inventory.Version
	if p.in.Features.PKI {
		f.csr = &activities.CSRResult{}
		if err := p.step(ctx, StepGencsr, p.host(), f.csr); err != nil {
			return nil, err
		}
		csr := *f.csr
		csr.Attempted = activities.Attempted{} // the helper contract's keys only
		f.helper.Input.CSR = &csr
	}
	return f, nil
}

// host addresses the host; the run's first RPC carries the sighting time, so that a host that
// does not answer because it was provisioned after that sighting is recognised (activities.RunHistory).
func (p *provisioner) host() activities.HostInput {
	if p.stepRuns == 0 {
		return activities.HostInput{Identity: p.in.Identity, SeenAt: p.in.SeenAt}
	}
	return activities.HostInput{Identity: p.in.Identity}
}

func (p *provisioner) askHelper(ctx workflow.Context, f *facts) (*activities.HelperOutput, error) {
	var d activities.HelperOutput
	if err := p.step(ctx, StepHelper, f.helper, &d); err != nil {
		return nil, err
	}
	p.status.HelperMessage = d.Msg
	switch {
	case d.Shutdown:
		p.status.HelperDecision = DecisionShutdown
	case d.Defer:
		p.status.HelperDecision = DecisionDefer
	default:
		p.status.HelperDecision = DecisionConfigure
	}
	return &d, nil
}

func (p *provisioner) shutdown(ctx workflow.Context, msg string) (outcome, error) {
	var res activities.MessageResult
	if err := p.step(ctx, StepShutdown, p.host(), &res); err != nil {
		// go-choria's agent may exit before its reply leaves (its splay can be 0 s): silence
		// after a shutdown request is the expected end, not a failure
		if !activities.IsNoReply(err) || (!p.lean() && workflow.GetVersion(ctx, shutdownUnconfirmedChange, workflow.DefaultVersion, 1) < 1) {
			return outcome{}, err
		}
		msg += " (the server did not confirm: it exits at once when its splay is 0 s)"
	}
	return outcome{decision: DecisionShutdown, msg: msg}, nil
}

// upgrade updates the server to the helper's version first (features.upgrades) when it runs
// another one and can be upgraded. It reports whether the server was upgraded (it then restarts
// into the new version, still in provisioning mode, and the steps run again). Failures end the
// host unless upgrades_optional, when provisioning goes on with the running version.
func (p *provisioner) upgrade(ctx workflow.Context, version string, inv *activities.InventoryResult) (bool, error) {
	if !p.in.Features.Upgrades || version == "" || CompareVersions(inv.Version, version) == 0 {
		return false, nil
	}
	var err error
	switch {
	case p.status.Upgraded == version:
		err = fmt.Errorf("the server reports version %s after the upgrade to %s", inv.Version, version)
	case !inv.Upgradable:
		err = fmt.Errorf("the helper asked for version %s but the server (%s) is not upgradable", version, inv.Version)
	}
	if err != nil {
		err = &stepError{step: StepUpgrade, err: activities.NewError(activities.ErrTypeConfig, err.Error(), nil)}
	} else if err = p.step(ctx, StepUpgrade, activities.UpgradeInput{Identity: p.in.Identity, Version: version}, &activities.MessageResult{}); err == nil {
		p.status.Upgraded = version
		// the server restarts 2 s after replying; the next steps' retries cover its reconnection
		return true, workflow.Sleep(ctx, upgradeRestartWait)
	}
	if !p.in.Features.UpgradesOptional {
		return false, err
	}
	p.log.Warn("upgrade failed, provisioning the running version (upgrades_optional)", "error", reason(err))
	p.status.LastError = reason(err)
	return false, nil
}

// configure signs the server's JWT, sends the configuration and restarts the server into it.
func (p *provisioner) configure(ctx workflow.Context, f *facts, d *activities.HelperOutput) error {
	conf := configureInput(p.in.Identity, f, d)
	if p.in.Features.ED25519 {
		sign := activities.SignInput{Identity: p.in.Identity, PublicKey: f.helper.Input.ED25519PubKey.PublicKey,
			Config: d.Configuration, Claims: d.ServerClaims}
		if err := p.step(ctx, StepSign, sign, &conf.ServerJWT); err != nil {
			return err
		}
		if exp, capped := activities.SignerCappedExpiry(conf.ServerJWT); capped {
			p.status.Timeline[len(p.status.Timeline)-1].Note = fmt.Sprintf(
				"server JWT expires %s, with jwt_signing_token: the validity asked for was longer", exp.UTC().Format(time.RFC3339))
		}
	}
	var msg activities.MessageResult
	if err := p.step(ctx, StepConfigure, conf, &msg); err != nil {
		return err
	}
	if err := p.step(ctx, StepRestart, activities.RestartInput{Identity: p.in.Identity, Splay: p.in.RestartSplay}, &msg); err != nil {
		return err
	}
	p.restartedAt = msg.At // when the server was asked, not when this task read the reply
	if p.restartedAt.IsZero() {
		p.restartedAt = workflow.Now(ctx)
	}
	if p.lean() {
		return nil // a late sighting is judged by the result's RestartedAt (discovery), not absorbed here
	}
	// Stay open until the server has restarted out of provisioning mode (it waits splay+2 s, at
	// most, then re-executes): a sighting made before the restart, delivered late, is absorbed
	// here instead of starting a new run against a server that is about to leave.
	if workflow.GetVersion(ctx, restartGraceChange, workflow.DefaultVersion, 1) >= 1 {
		p.status.Step = StepRestart
		return workflow.Sleep(ctx, time.Duration(p.in.RestartSplay+restartGraceSeconds)*time.Second)
	}
	return nil
}

func configureInput(identity string, f *facts, d *activities.HelperOutput) activities.ConfigureInput {
	conf := activities.ConfigureInput{Identity: identity, Configuration: d.Configuration, Certificate: d.Certificate,
		CA: d.CA, SSLDir: d.SSLDir, ActionPolicies: d.ActionPolicies, OPAPolicies: d.OPAPolicies}
	if f.csr != nil && f.csr.SSLDir != "" {
		conf.SSLDir = f.csr.SSLDir // where the server put its key: the certificate must go beside it
	}
	if d.Key != "" {
		conf.Key, conf.ECDHPublic = d.Key, f.jwt.ECDHPublic
	}
	return conf
}
