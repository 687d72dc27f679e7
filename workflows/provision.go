package workflows

import (
	"errors"
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

// noReply is true when a step failed because the host never answered.
func noReply(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == activities.ErrTypeRPC
}

// ErrTypeProvisionFailed is the error type of a host's workflow that ran out of retries or met a
// policy outcome; its message names the step and the reason.
const ErrTypeProvisionFailed = "ProvisionFailed"

type provisioner struct {
	in     ProvisionInput
	status Status
	log    log.Logger
	// transitionsOnly: upsert ProvisionStep only for the helper, a defer, a failure and the end
	transitionsOnly bool
	// localReads: jwt, gen25519, inventory and sign run as local activities
	localReads bool
}

// ProvisionHost provisions one Choria Server: jwt -> gen25519 -> inventory -> helper -> sign ->
// configure -> restart, each an activity with its own retry policy. A helper defer waits on a
// durable timer and runs the steps again; a helper shutdown shuts the server down and ends.
func ProvisionHost(ctx workflow.Context, in ProvisionInput) (*ProvisionResult, error) {
	if err := ValidateIdentity(in.Identity); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeProvisionFailed, err)
	}
	if in.DeferDelay <= 0 {
		in.DeferDelay = DefaultDeferDelay
	}
	if in.MaxDefers <= 0 {
		in.MaxDefers = DefaultMaxDefers
	}
	if in.RestartSplay <= 0 {
		in.RestartSplay = DefaultRestartSplay
	}

	p := &provisioner{in: in}
	if err := p.setup(ctx); err != nil {
		return nil, err
	}
	return p.run(ctx)
}

func (p *provisioner) setup(ctx workflow.Context) error {
	p.log = log.With(workflow.GetLogger(ctx), "identity", p.in.Identity, "site", p.in.Site)
	p.status = Status{Identity: p.in.Identity, Site: p.in.Site, Outcome: OutcomeRunning, Defers: p.in.Defers, Sightings: 1}

	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (Status, error) { return p.status, nil }); err != nil {
		return err
	}

	pause := workflow.GetSignalChannel(ctx, PauseSignal)
	resume := workflow.GetSignalChannel(ctx, ResumeSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); p.status.Paused = true })
			sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); p.status.Paused = false })
			sel.Select(ctx)
			if ctx.Err() != nil {
				return
			}
		}
	})

	seen := workflow.GetSignalChannel(ctx, SeenSignal)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var s Sighting
			if !seen.Receive(ctx, &s) {
				return
			}
			p.status.Sightings++
			p.status.LastSeen = s.At
		}
	})

	p.transitionsOnly = workflow.GetVersion(ctx, transitionsOnlyChange, workflow.DefaultVersion, 1) >= 1
	p.localReads = p.in.LocalReads && workflow.GetVersion(ctx, localReadsChange, workflow.DefaultVersion, 1) >= 1
	if p.transitionsOnly {
		// starters set these (StartSearchAttributes); a run started without them still gets them
		if id, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(IdentityKey); ok && id == p.in.Identity {
			return nil
		}
	}
	return p.upsert(ctx, IdentityKey.ValueSet(p.in.Identity), SiteKey.ValueSet(p.in.Site), OutcomeKey.ValueSet(OutcomeRunning))
}

func (p *provisioner) upsert(ctx workflow.Context, updates ...temporal.SearchAttributeUpdate) error {
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		return fmt.Errorf("upserting search attributes: %w", err)
	}
	return nil
}

func (p *provisioner) run(ctx workflow.Context) (*ProvisionResult, error) {
	for {
		decision, err := p.pass(ctx)
		if err != nil && p.stale(err) {
			return p.finish(ctx, OutcomeProvisioned, "no longer in provisioning mode: a stale sighting of a provisioned server")
		}
		if err != nil {
			return nil, p.fail(ctx, err)
		}
		switch {
		case decision.Shutdown:
			return p.finish(ctx, OutcomeShutdown, "shut down at the helper's request: "+decision.Msg)
		case decision.Defer:
			if err := p.deferHost(ctx, decision.Msg); err != nil {
				return nil, err
			}
		case decision.again:
			continue // the server was upgraded and restarted: run the steps against the new version
		default:
			return p.finish(ctx, OutcomeProvisioned, "provisioned")
		}
	}
}

// passResult is the helper's decision, or again when the steps must run once more.
type passResult struct {
	*activities.HelperOutput
	again bool
}

// pass runs the steps once. It returns the helper's decision when the host was deferred or shut
// down, and an empty decision when it was configured and restarted.
func (p *provisioner) pass(ctx workflow.Context) (*passResult, error) {
	host := activities.HostInput{Identity: p.in.Identity}
	// the run's first RPC carries the sighting time, so that a host that does not answer
	// because it was provisioned after that sighting is recognised (activities.RunHistory)
	first := func() activities.HostInput {
		if len(p.status.Timeline) == 0 {
			return activities.HostInput{Identity: p.in.Identity, SeenAt: p.in.SeenAt}
		}
		return host
	}
	helperIn := activities.HelperRequest{Input: activities.HelperInput{Identity: p.in.Identity}}
	var jwtRes activities.JWTResult

	if p.in.Features.JWT {
		if err := p.step(ctx, StepJWT, activities.FetchJWTName, first(), &jwtRes); err != nil {
			return nil, err
		}
		helperIn.Input.JWT = jwtRes.Claims
		helperIn.HadToken = jwtRes.HadToken
	}

	if p.in.Features.ED25519 {
		var ed activities.ED25519Result
		if err := p.step(ctx, StepGen25519, activities.Gen25519Name, first(), &ed); err != nil {
			return nil, err
		}
		// the helper contract's keys only: no attempt count
		helperIn.Input.ED25519PubKey = &activities.ED25519Result{PublicKey: ed.PublicKey, Directory: ed.Directory, Signature: ed.Signature}
	}

	var inv activities.InventoryResult
	if err := p.step(ctx, StepInventory, activities.InventoryName, first(), &inv); err != nil {
		return nil, err
	}
	helperIn.Input.Inventory = inv.Inventory
	p.status.ServerVersion = inv.Version

	var csr *activities.CSRResult
	if p.in.Features.PKI {
		csr = &activities.CSRResult{}
		if err := p.step(ctx, StepGencsr, activities.GencsrName, host, csr); err != nil {
			return nil, err
		}
		helperIn.Input.CSR = &activities.CSRResult{CSR: csr.CSR, PublicKey: csr.PublicKey, SSLDir: csr.SSLDir}
	}

	var decision activities.HelperOutput
	if err := p.step(ctx, StepHelper, activities.RunHelperName, helperIn, &decision); err != nil {
		return nil, err
	}
	p.status.HelperMessage = decision.Msg
	switch {
	case decision.Shutdown:
		p.status.HelperDecision = DecisionShutdown
	case decision.Defer:
		p.status.HelperDecision = DecisionDefer
	default:
		p.status.HelperDecision = DecisionConfigure
	}

	if decision.Shutdown {
		var msg activities.MessageResult
		if err := p.step(ctx, StepShutdown, activities.ShutdownName, host, &msg); err != nil {
			// go-choria's agent may exit before its reply leaves (its splay can be 0 s): silence
			// after a shutdown request is the expected end, not a failure
			if !noReply(err) || workflow.GetVersion(ctx, shutdownUnconfirmedChange, workflow.DefaultVersion, 1) < 1 {
				return nil, err
			}
			decision.Msg += " (the server did not confirm: it exits at once when its splay is 0 s)"
		}
		return &passResult{HelperOutput: &decision}, nil
	}
	if decision.Defer {
		return &passResult{HelperOutput: &decision}, nil
	}
	if again, err := p.upgrade(ctx, decision.Upgrade, &inv); again || err != nil {
		return &passResult{HelperOutput: &activities.HelperOutput{}, again: true}, err
	}

	conf := activities.ConfigureInput{
		Identity:       p.in.Identity,
		Configuration:  decision.Configuration,
		Certificate:    decision.Certificate,
		CA:             decision.CA,
		SSLDir:         decision.SSLDir,
		ActionPolicies: decision.ActionPolicies,
		OPAPolicies:    decision.OPAPolicies,
	}
	if csr != nil && csr.SSLDir != "" {
		conf.SSLDir = csr.SSLDir // where the server put its key: the certificate must go beside it
	}
	if decision.Key != "" {
		conf.Key = decision.Key
		conf.ECDHPublic = jwtRes.ECDHPublic
	}

	if p.in.Features.ED25519 {
		sign := activities.SignInput{
			Identity:  p.in.Identity,
			PublicKey: helperIn.Input.ED25519PubKey.PublicKey,
			Config:    decision.Configuration,
			Claims:    decision.ServerClaims,
		}
		if err := p.step(ctx, StepSign, activities.SignServerJWTName, sign, &conf.ServerJWT); err != nil {
			return nil, err
		}
		if exp, capped := activities.SignerCappedExpiry(conf.ServerJWT); capped {
			p.status.Timeline[len(p.status.Timeline)-1].Note = fmt.Sprintf(
				"server JWT expires %s, with jwt_signing_token: the validity asked for was longer", exp.UTC().Format(time.RFC3339))
		}
	}

	var msg activities.MessageResult
	if err := p.step(ctx, StepConfigure, activities.ConfigureName, conf, &msg); err != nil {
		return nil, err
	}
	if err := p.step(ctx, StepRestart, activities.RestartName, activities.RestartInput{Identity: p.in.Identity, Splay: p.in.RestartSplay}, &msg); err != nil {
		return nil, err
	}
	// Stay open until the server has restarted out of provisioning mode (it waits splay+2 s, at
	// most, then re-executes): a sighting made before the restart, delivered late, is absorbed
	// here instead of starting a new run against a server that is about to leave.
	if workflow.GetVersion(ctx, restartGraceChange, workflow.DefaultVersion, 1) >= 1 {
		p.status.Step = StepRestart
		if err := workflow.Sleep(ctx, time.Duration(p.in.RestartSplay+restartGraceSeconds)*time.Second); err != nil {
			return nil, err
		}
	}
	return &passResult{HelperOutput: &activities.HelperOutput{}}, nil
}

// upgrade updates the server to the helper's version first (features.upgrades) when it runs
// another one and can be upgraded. It reports whether the server was upgraded (it then restarts
// into the new version, still in provisioning mode, and the steps run again). Failures end the
// host unless upgrades_optional, when provisioning goes on with the running version.
func (p *provisioner) upgrade(ctx workflow.Context, version string, inv *activities.InventoryResult) (bool, error) {
	if !p.in.Features.Upgrades || version == "" || activities.CompareVersions(inv.Version, version) == 0 {
		return false, nil
	}
	optional := func(err error) (bool, error) {
		if p.in.Features.UpgradesOptional {
			p.log.Warn("upgrade failed, provisioning the running version (upgrades_optional)", "error", reason(err))
			p.status.LastError = reason(err)
			return false, nil
		}
		return false, err
	}
	switch {
	case p.status.Upgraded == version:
		return optional(&stepError{step: StepUpgrade, err: temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the server reports version %s after the upgrade to %s", inv.Version, version), activities.ErrTypeConfig, nil)})
	case !inv.Upgradable:
		return optional(&stepError{step: StepUpgrade, err: temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the helper asked for version %s but the server (%s) is not upgradable", version, inv.Version), activities.ErrTypeConfig, nil)})
	}
	var msg activities.MessageResult
	if err := p.step(ctx, StepUpgrade, activities.ReleaseUpdateName, activities.UpgradeInput{Identity: p.in.Identity, Version: version}, &msg); err != nil {
		return optional(err)
	}
	p.status.Upgraded = version
	// the server restarts 2 s after replying; the next steps' retries cover its reconnection
	if err := workflow.Sleep(ctx, upgradeRestartWait); err != nil {
		return false, err
	}
	return true, nil
}

// step runs one activity with the step's options and records each run in the timeline. Steps
// with workflow-level attempts (the helper) retry here rather than in the activity, so every
// failed attempt is its own ActivityTaskFailed event, visible in history with its reason.
func (p *provisioner) step(ctx workflow.Context, step string, activity string, arg any, result any) error {
	// a fleet-wide pause holds the host here, before its next RPC
	if err := workflow.Await(ctx, func() bool { return !p.status.Paused }); err != nil {
		return err
	}
	p.status.Step = step
	if !p.transitionsOnly || step == StepHelper {
		// the helper is the step a host can spend minutes in (a slow CMDB or CA): findable
		if err := p.upsert(ctx, StepKey.ValueSet(step)); err != nil {
			return err
		}
	}
	opts, attempts := stepOptions(step)
	if step == StepHelper && p.in.HelperTaskQueue != "" {
		opts.TaskQueue = p.in.HelperTaskQueue // rate limited across all workers (helper_rate_limit)
	}
	execute := func() workflow.Future {
		return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activity, arg)
	}
	if p.localReads && localStep(step) {
		lopts := workflow.LocalActivityOptions{StartToCloseTimeout: opts.StartToCloseTimeout, RetryPolicy: opts.RetryPolicy,
			ScheduleToCloseTimeout: localScheduleToClose}
		execute = func() workflow.Future {
			return workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lopts), activity, arg)
		}
	}
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		p.status.Attempt = attempt
		p.status.Timeline = append(p.status.Timeline, StepRecord{Step: step, Started: workflow.Now(ctx)})
		rec := &p.status.Timeline[len(p.status.Timeline)-1]
		err := execute().Get(ctx, result)
		rec.Ended = workflow.Now(ctx)
		if err == nil {
			if a, ok := result.(interface{ GetAttempt() int32 }); ok {
				rec.Attempts = a.GetAttempt()
			} else if attempts > 1 {
				rec.Attempts = 1 // the workflow runs each attempt of this step itself
			}
			return nil
		}
		rec.Attempts = failedAttempts(err)
		rec.Error = reason(err)
		p.status.LastError = rec.Error
		var app *temporal.ApplicationError
		if attempt >= attempts || (errors.As(err, &app) && app.NonRetryable()) || temporal.IsCanceledError(err) {
			return &stepError{step: step, err: err}
		}
		p.log.Warn("step failed, retrying", "step", step, "attempt", attempt, "error", rec.Error)
		if err := workflow.Sleep(ctx, backoff); err != nil {
			return err
		}
		backoff *= 2
	}
}

// stale is true when the very first RPC found the server already out of provisioning mode: the
// sighting that started this run is older than the server's last restart.
func (p *provisioner) stale(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == activities.ErrTypeNotProvisioning && len(p.status.Timeline) == 1
}

func (p *provisioner) deferHost(ctx workflow.Context, msg string) error {
	p.status.Defers++
	p.status.Outcome = OutcomeDeferred
	p.status.Step = StepDeferred
	p.status.Message = "deferred by the helper: " + msg
	p.log.Info("helper deferred the host", "msg", msg, "defers", p.status.Defers)

	if p.status.Defers >= p.in.MaxDefers {
		return p.fail(ctx, fmt.Errorf("the helper deferred the host %d times, the limit", p.status.Defers))
	}
	if err := p.upsert(ctx, StepKey.ValueSet(StepDeferred), OutcomeKey.ValueSet(OutcomeDeferred)); err != nil {
		return err
	}
	if err := workflow.Sleep(ctx, p.in.DeferDelay); err != nil {
		return err
	}
	if p.status.Defers-p.in.Defers >= continueAsNewDefers {
		next := p.in
		next.Defers = p.status.Defers
		next.Source = SourceDiscovery
		next.SeenAt = time.Time{}
		return workflow.NewContinueAsNewError(ctx, ProvisionHost, next)
	}
	p.status.Outcome = OutcomeRunning
	return p.upsert(ctx, OutcomeKey.ValueSet(OutcomeRunning))
}

func (p *provisioner) finish(ctx workflow.Context, outcome, msg string) (*ProvisionResult, error) {
	p.status.Outcome = outcome
	p.status.Step = StepDone
	p.status.Message = msg
	if err := p.upsert(ctx, StepKey.ValueSet(StepDone), OutcomeKey.ValueSet(outcome)); err != nil {
		return nil, err
	}
	p.log.Info("host finished", "outcome", outcome)
	return &ProvisionResult{Identity: p.in.Identity, Outcome: outcome, Message: msg}, nil
}

// fail ends the workflow in the failed state with the reason: the failed step stays in
// ProvisionStep, and the workflow's failure message says what went wrong.
func (p *provisioner) fail(ctx workflow.Context, err error) error {
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return err
	}
	p.status.Outcome = OutcomeFailed
	p.status.Message = reason(err)
	updates := []temporal.SearchAttributeUpdate{OutcomeKey.ValueSet(OutcomeFailed)}
	if p.transitionsOnly && p.status.Step != "" {
		updates = append(updates, StepKey.ValueSet(p.status.Step)) // where it failed
	}
	if uerr := p.upsert(ctx, updates...); uerr != nil {
		return uerr
	}
	p.log.Error("host failed", "error", p.status.Message)
	return temporal.NewNonRetryableApplicationError(p.status.Message, ErrTypeProvisionFailed, err)
}

// failedAttempts reads the attempt count the activity put in its error's details.
func failedAttempts(err error) int32 {
	var app *temporal.ApplicationError
	var n int32
	if errors.As(err, &app) && app.HasDetails() && app.Details(&n) == nil {
		return n
	}
	return 0
}

type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return fmt.Sprintf("step %s: %s", e.step, reason(e.err)) }
func (e *stepError) Unwrap() error { return e.err }

// reason digs the application error's own message out of Temporal's activity error wrapping,
// prefixed with the step it failed in.
func reason(err error) string {
	var se *stepError
	if errors.As(err, &se) {
		return se.Error()
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		if app.Type() != "" {
			return fmt.Sprintf("%s (%s)", app.Message(), app.Type())
		}
		return app.Message()
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return "timed out: " + timeout.Error()
	}
	return err.Error()
}

// localScheduleToClose bounds a local read with all its retries (five tries of at most the RPC
// timeout, with backoff).
const localScheduleToClose = 3 * time.Minute

// localStep is true for the steps that may run as local activities: cheap, and safe to repeat if
// a worker dies before the workflow task that records them completes (reads, a new key, a
// signature over the same claims).
func localStep(step string) bool {
	switch step {
	case StepJWT, StepGen25519, StepInventory, StepSign:
		return true
	}
	return false
}

// stepOptions are each step's timeouts and retry budget, and how many times the workflow itself
// runs the activity. Budgets follow the Choria Provisioner's (jwt 3, gen25519 5, inventory 5,
// configure 5, restart 3, shutdown 3) with more room where a failure is likely transient, and
// backoff so a flapping host does not spin.
func stepOptions(step string) (workflow.ActivityOptions, int) {
	nonRetryable := []string{
		activities.ErrTypeInvalidJWT, activities.ErrTypeBadSignature, activities.ErrTypeSigning,
		activities.ErrTypeConfig, activities.ErrTypeNotProvisioning, activities.ErrTypeCSR,
	}
	policy := &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        10 * time.Second,
		MaximumAttempts:        5,
		NonRetryableErrorTypes: nonRetryable,
	}
	// The heartbeat timeout finds a dead worker's steps fast: activities beat every 2 s once they
	// have run that long (activities.HeartbeatEvery).
	opts := workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: 10 * time.Second, RetryPolicy: policy}
	switch step {
	case StepUpgrade:
		policy.MaximumAttempts = 3 // as the Choria Provisioner
		opts.StartToCloseTimeout = 2 * time.Minute
	case StepShutdown:
		policy.MaximumAttempts = 2 // a host that was told to shut down is often gone before a third try
	case StepRestart:
		policy.MaximumAttempts = 3
	case StepGencsr:
		policy.MaximumAttempts = 2 // the Choria Provisioner tried once; a new key per attempt is cheap
	case StepSign:
		policy.MaximumAttempts = 2
		opts.StartToCloseTimeout = 30 * time.Second
	case StepHelper:
		// the helper has its own timeout (helper_timeout); this only bounds a stuck worker.
		// Its five attempts are run by the workflow so each failure is recorded (see step).
		opts.StartToCloseTimeout = 5 * time.Minute
		policy.MaximumAttempts = 1
		return opts, 5
	}
	return opts, 1
}
