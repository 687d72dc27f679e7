package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/choria-temporal/provisioner/activities"
)

// upgradeRestartWait is how long a run waits for an upgraded server to restart before its reads
// run again (go-choria restarts 2 s after replying; the reads' retries cover the rest).
const upgradeRestartWait = 4 * time.Second

// provisioner is one run of a host's workflow: its input, the policy it recorded, and what the
// status query shows.
type provisioner struct {
	in     ProvisionInput
	policy Policy
	status Status
	log    log.Logger
	// passes counts the passes over the steps: only the first one's reads carry the sighting time
	passes int
	// answered: the host answered a read in this run (readAll)
	answered bool
	// configured: the configure RPC succeeded in this run
	configured bool
	// restartedAt: when the restart RPC succeeded (the result carries it for discovery)
	restartedAt time.Time
	// nonce seals the run's requests (recorded with the policy); seq counts the requests sent
	nonce string
	seq   int
	// digest is the recorded policy's configuration digest, current the worker's; drifted: the
	// difference was reported
	digest, current string
	drifted         bool
	hooks           Hooks
	// askedAgain: a sign or configure was refused as resting on another run's replies (a reset
	// run), and the steps ran again from the reads; a second refusal fails the run
	askedAgain bool
	// signer runs the sign step locally in this worker (nil: the registered activity, in tests)
	signer *activities.LocalSigner
}

// outcome is what one pass over the steps decided.
type outcome struct {
	decision string // DecisionConfigure, DecisionDefer or DecisionShutdown
	msg      string // the helper's message, or what the pass knows of the restart
	again    bool   // the server was upgraded and restarted: run the steps again
}

// facts is what the reads of a pass gathered for the helper and the configure step.
type facts struct {
	helper    activities.HelperRequest
	jwt       activities.JWTResult
	inventory activities.InventoryResult
	csr       *activities.CSRResult
	// replies are the seals of the reads' and the helper's answers: what a signature and a
	// configuration rest on (activities.Approval)
	replies []activities.Seal
}

// ProvisionHost provisions one Choria Server: jwt, gen25519 or gencsr, and inventory together,
// then the helper, sign, configure and restart, each an activity with its own retry policy. A
// helper defer waits on a durable timer and runs the steps again; a helper shutdown shuts the
// server down and ends. The input names the host; the worker's policy decides the rest.
func (h HostWorkflow) ProvisionHost(ctx workflow.Context, in ProvisionInput) (*ProvisionResult, error) {
	if err := ValidateIdentity(in.Identity); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeProvisionFailed, err)
	}
	// a run acts on the host its workflow ID names, whatever an input copied from another says
	if id, _ := IdentityFromWorkflowID(workflow.GetInfo(ctx).WorkflowExecution.ID); id != in.Identity {
		err := fmt.Errorf("%w: the input names %q, the workflow %s", ErrForeignInput, in.Identity, workflow.GetInfo(ctx).WorkflowExecution.ID)
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeProvisionFailed, err)
	}
	p := &provisioner{in: in, hooks: h.Hooks, signer: h.Signer}
	if err := p.setup(ctx, h.Policy); err != nil {
		return nil, err
	}
	return p.run(ctx)
}

// setup records the worker's policy, then installs the status query and the signal handlers.
func (p *provisioner) setup(ctx workflow.Context, policy Policy) error {
	// a side effect: read from the worker once, replayed from the history ever after
	if err := p.pin(ctx, policy); err != nil {
		return err
	}
	p.log = log.With(workflow.GetLogger(ctx), "identity", p.in.Identity, "site", p.policy.Site)
	p.status = Status{Identity: p.in.Identity, Site: p.policy.Site, Outcome: OutcomeRunning, Defers: p.in.Defers,
		Source: p.in.Source, SeenAt: p.in.SeenAt}
	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (Status, error) { return p.status, nil }); err != nil {
		return err
	}
	p.handlePause(ctx)
	// starters set them (Starter.Options); a run started without them still gets them, and one
	// that started with another outcome (a continuation a worker before this one made carries
	// its run's "deferred") is running
	sa := workflow.GetTypedSearchAttributes(ctx)
	id, _ := sa.GetKeyword(IdentityKey)
	if outcome, _ := sa.GetKeyword(OutcomeKey); id == p.in.Identity && outcome == OutcomeRunning {
		return nil
	}
	return p.upsert(ctx, IdentityKey.ValueSet(p.in.Identity), SiteKey.ValueSet(p.policy.Site), OutcomeKey.ValueSet(OutcomeRunning))
}

// handlePause keeps the fleet-wide pause in the status, in one coroutine: each is a goroutine
// with its own stack for as long as the run is in the worker's cache, and at scale thousands are.
// It reads only the requests ControlSignals verified: a forged, empty or stale pause or resume
// never reaches the run.
func (p *provisioner) handlePause(ctx workflow.Context) {
	requests := controlRequests(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			req, ok := requests.Receive(ctx)
			if !ok {
				return
			}
			p.status.Paused = req.Action == PauseSignal
		}
	})
}

// run is the host's life: passes over the steps until the helper's decision ends it.
func (p *provisioner) run(ctx workflow.Context) (*ProvisionResult, error) {
	for {
		out, err := p.pass(ctx)
		switch {
		case err != nil && staleSighting(err):
			return p.finish(ctx, OutcomeProvisioned, "no longer in provisioning mode: a stale sighting of a provisioned server")
		case err != nil && staleApproval(err) && !p.askedAgain:
			p.askAgain(ctx, err)
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
			return p.finish(ctx, OutcomeProvisioned, "provisioned"+out.msg)
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
	if err == nil {
		f.replies = append(f.replies, d.Reply)
	}
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
	if err := p.configure(ctx, f, d); err != nil {
		return outcome{}, err
	}
	note, err := p.restart(ctx)
	return outcome{decision: DecisionConfigure, msg: note}, err
}

// askAgain starts the steps again from the reads: the sign or configure step refused the facts
// and decision this run replayed from the history a reset copied (activities.Approval). Nothing
// was signed or sent on them; the host is read and the helper asked again, and the run ends as
// the helper now says.
func (p *provisioner) askAgain(ctx workflow.Context, err error) {
	p.askedAgain = true
	p.log.Warn("the decision was received by another run: reading the host and asking the helper again", "error", reason(err))
	p.status.LastError = reason(err)
	p.status.HelperDecision, p.status.HelperMessage = "", ""
	p.details(ctx, "reset: the decision replayed from another run is not acted on; reading the host and asking the helper again")
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
		if !activities.IsNoReply(err) {
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
	if !p.policy.Features.Upgrades || version == "" || CompareVersions(inv.Version, version) == 0 {
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
		return true, p.sleep(ctx, upgradeRestartWait, "waiting for the server to restart into "+version)
	}
	if !p.policy.Features.UpgradesOptional {
		return false, err
	}
	p.log.Warn("upgrade failed, provisioning the running version (upgrades_optional)", "error", reason(err))
	p.status.LastError = reason(err)
	return false, nil
}

// configure signs the server's JWT (ed25519) and sends the configuration.
func (p *provisioner) configure(ctx workflow.Context, f *facts, d *activities.HelperOutput) error {
	conf := configureInput(p.in.Identity, f, d)
	var signer string
	if p.policy.Features.ED25519 {
		sign := activities.SignInput{Identity: p.in.Identity, PublicKey: f.helper.Input.ED25519PubKey.PublicKey,
			Config: d.Configuration, Claims: d.ServerClaims, Approval: conf.Approval}
		var signed activities.SignResult
		if err := p.step(ctx, StepSign, sign, &signed); err != nil {
			return err
		}
		conf.ServerJWT, conf.Signer, signer = signed.JWT, signed.Signer, signed.Signer
		if exp, capped := activities.SignerCappedExpiry(conf.ServerJWT); capped {
			p.status.Timeline[len(p.status.Timeline)-1].Note = fmt.Sprintf(
				"server JWT expires %s, with jwt_signing_token: the validity asked for was longer", exp.UTC().Format(time.RFC3339))
		}
	}
	if err := p.step(ctx, StepConfigure, conf, &activities.MessageResult{}); err != nil {
		return err
	}
	p.configured = true
	p.status.Issued = activities.IssuedIdentity(workflow.Now(ctx), conf.ServerJWT, signer, conf.Certificate, conf.CA)
	return nil
}

// restart restarts the configured server into its configuration. A restart that gets no reply
// after the run configured the server is the server's own restart under way (a worker died
// after an earlier attempt reached it: go-choria re-executes 2 s after replying): a server that
// was configured but not told to restart still answers on the provisioning collective.
func (p *provisioner) restart(ctx workflow.Context) (string, error) {
	var msg activities.MessageResult
	err := p.step(ctx, StepRestart, activities.RestartInput{Identity: p.in.Identity, Splay: p.policy.RestartSplay}, &msg)
	switch {
	case err != nil && p.configured && activities.IsNoReply(err):
		p.restartedAt = workflow.Now(ctx)
		return "; the restart was not confirmed: the configured server no longer answers in provisioning mode", nil
	case err != nil:
		return "", err
	}
	p.restartedAt = msg.At // when the server was asked, not when this task read the reply
	if p.restartedAt.IsZero() {
		p.restartedAt = workflow.Now(ctx)
	}
	return "", nil
}

func configureInput(identity string, f *facts, d *activities.HelperOutput) activities.ConfigureInput {
	conf := activities.ConfigureInput{Identity: identity, Configuration: d.Configuration, Certificate: d.Certificate,
		CA: d.CA, SSLDir: d.SSLDir, ActionPolicies: d.ActionPolicies, OPAPolicies: d.OPAPolicies,
		Approval: activities.Approval{Facts: f.replies}}
	if f.csr != nil && f.csr.SSLDir != "" {
		conf.SSLDir = f.csr.SSLDir // where the server put its key: the certificate must go beside it
	}
	if d.SealedKey != nil || d.Key != "" { // Key: a history recorded before keys were sealed
		conf.SealedKey, conf.Key, conf.ECDHPublic = d.SealedKey, d.Key, f.jwt.ECDHPublic
	}
	return conf
}
