package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/golang/provision"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/logging"
	"github.com/choria-temporal/provisioner/internal/metrics"
)

// Activities holds what every activity needs for the life of the worker process: one Choria
// framework, the helper runner and the server JWT signer. Create it once per process.
type Activities struct {
	fw      inter.Framework
	cfg     *config.Config
	helper  *HelperRunner
	signer  *ServerJWTSigner
	metrics *metrics.Metrics
	log     *zap.Logger
	runs    RunHistory
	caller  rpcCaller
}

// RunHistory answers, from Temporal, whether a host's workflow had a run that completed after a
// given time. A discovery sweep's reply sent just before a host restarted can reach Temporal after
// that host's run has closed and start a new run against a server that has left the provisioning
// collective; that run's first RPC gets no reply. Telling it apart from a vanished host needs
// the earlier run's close time, which only Temporal has.
type RunHistory interface {
	CompletedAfter(ctx context.Context, workflowID, excludeRunID string, after time.Time) (closed time.Time, found bool, err error)
}

// Option adds an optional dependency to Activities.
type Option func(*Activities)

// WithRunHistory lets the first RPC of a run recognise a stale sighting.
func WithRunHistory(r RunHistory) Option {
	return func(a *Activities) { a.runs = r }
}

// stale turns a first RPC's "no reply" into a non-retryable NotInProvisioningMode error when
// the host's previous run completed after the sighting that started this run: the host was
// provisioned and left the provisioning collective, so it will never answer here.
func (a *Activities) stale(ctx context.Context, in HostInput, err error) error {
	var app *temporal.ApplicationError
	if a.runs == nil || in.SeenAt.IsZero() || !errors.As(err, &app) || app.Type() != ErrTypeRPC {
		return err
	}
	info := activity.GetInfo(ctx)
	closed, found, qerr := a.runs.CompletedAfter(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID, in.SeenAt)
	if qerr != nil {
		a.logger(ctx, in.Identity, "stale-check").Warn("could not read earlier runs", zap.Error(qerr))
		return err
	}
	if !found {
		return err
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"%s; an earlier run completed at %s, after the sighting at %s: the host is no longer in provisioning mode",
		app.Message(), closed.UTC().Format(time.RFC3339), in.SeenAt.UTC().Format(time.RFC3339)), ErrTypeNotProvisioning, err)
}

// New builds the activities over an established Choria client framework.
func New(fw inter.Framework, cfg *config.Config, m *metrics.Metrics, log *zap.Logger, opts ...Option) *Activities {
	a := &Activities{
		fw:      fw,
		cfg:     cfg,
		helper:  &HelperRunner{Command: cfg.HelperCommand, Timeout: cfg.HelperTimeoutDuration},
		signer:  &ServerJWTSigner{SigningKey: cfg.JWTSigningKey, SigningToken: cfg.JWTSigningToken, DefaultValidity: cfg.ServerJWTValidityDuration},
		metrics: m,
		log:     log,
	}
	for _, o := range opts {
		o(a)
	}
	a.caller = newCaller(fw, log)
	return a
}

// newCaller is the RPC client for fw: requests built and signed here for protocol v2 sites,
// go-choria's client for the others.
func newCaller(fw inter.Framework, log *zap.Logger) rpcCaller {
	if fw == nil {
		return failingCaller{errors.New("no Choria framework to send requests with")}
	}
	ddls, err := loadDDLs()
	if err != nil {
		// go-choria's embedded DDLs: broken only with the module; every RPC then says why
		return failingCaller{err}
	}
	direct, err := newDirectClient(fw, ddls)
	if err != nil && log != nil {
		log.Warn("building Choria requests with go-choria's client", zap.Error(err))
	}
	if direct != nil {
		return direct
	}
	return &goChoriaClient{fw: fw, ddls: ddls}
}

// messageResult is the reply of an action whose only output is a message.
func messageResult(ctx context.Context, r *rpcReply) (*MessageResult, error) {
	msg, _ := r.data["message"].(string)
	return &MessageResult{Message: msg, Attempted: attempted(ctx)}, nil
}

// replyDetails is what the generated clients' ResultDetails have in common.
type replyDetails interface {
	Sender() string
	OK() bool
	StatusMessage() string
}

func (a *Activities) logger(ctx context.Context, identity, step string) *zap.Logger {
	info := activity.GetInfo(ctx)
	return a.log.With(zap.String(logging.FieldIdentity, identity),
		zap.String(logging.FieldStep, step), zap.Int32(logging.FieldAttempt, info.Attempt))
}

// finish turns an activity error into its Temporal form and logs it. provision_errors is not
// counted here but once per run that ends failed (service's workflow interceptor): a step's last
// failure does not always fail the host (a stale sighting, an optional upgrade, a shutdown).
func (a *Activities) finish(ctx context.Context, identity, step string, err error) error {
	return a.finishRetried(ctx, identity, step, err, noWorkflowRetry)
}

// Who retries a step: Temporal, by the activity's retry policy (every step but the helper), or
// the workflow itself, one activity attempt per try (the helper), which then says whether this
// try is its last.
const (
	noWorkflowRetry = iota
	workflowRetries
	lastWorkflowTry
	workflowRetryUnknown
)

func (a *Activities) finishRetried(ctx context.Context, identity, step string, err error, workflowRetry int) error {
	if err == nil {
		return nil
	}
	log := a.logger(ctx, identity, step)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		err = temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeRPC, err)
		errors.As(err, &appErr)
	}
	info := activity.GetInfo(ctx)
	spent := false
	if rp := info.RetryPolicy; rp != nil && rp.MaximumAttempts > 0 && info.Attempt >= rp.MaximumAttempts {
		spent = true
	}
	final := appErr.NonRetryable()
	switch workflowRetry {
	case noWorkflowRetry:
		final = final || spent
	case lastWorkflowTry:
		final = true
	}
	notProvisioning := appErr.Type() == ErrTypeNotProvisioning
	shutdownGone := step == "shutdown" && appErr.Type() == ErrTypeRPC && spent
	opts := temporal.ApplicationErrorOptions{
		// carry the attempt to the workflow's timeline
		NonRetryable: appErr.NonRetryable(), Cause: errors.Unwrap(appErr), Details: []any{info.Attempt},
	}
	if !final || notProvisioning || shutdownGone {
		// a try that is retried, or an expected end: the SDK logs it at debug, not error
		opts.Category = temporal.ApplicationErrorCategoryBenign
	}
	err = temporal.NewApplicationErrorWithOptions(appErr.Message(), appErr.Type(), opts)
	switch {
	case notProvisioning:
		// the workflow decides: a stale sighting of a provisioned host, or a failure it reports
		log.Info("the server is not in provisioning mode", zap.Error(err))
	case shutdownGone:
		log.Warn("no reply to shutdown: a server exits at once when its splay is 0 s", zap.Error(err))
	case final:
		log.Error("step failed, no retries left", zap.Error(err))
	case workflowRetry == workflowRetryUnknown:
		log.Warn("step failed", zap.Error(err))
	default:
		log.Warn("step failed, will retry", zap.Error(err))
	}
	return err
}

// busy counts the step in choria_provisioner_busy_workers until the returned func runs.
func (a *Activities) busy() func() {
	g := a.metrics.BusyWorkers.WithLabelValues(a.cfg.Site)
	g.Inc()
	return g.Dec
}

// HeartbeatEvery is how often a step that runs long tells Temporal its worker is alive. Steps
// run with a heartbeat timeout, so the steps of a worker that died are retried elsewhere within
// seconds instead of after their start-to-close timeout. A step done sooner sends none.
const HeartbeatEvery = 2 * time.Second

// heartbeat beats until the returned func runs.
func heartbeat(ctx context.Context) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

// one checks that exactly one reply came, from the addressed host, with an OK status.
func (a *Activities) one(identity, rpc string, replies []replyDetails) error {
	switch {
	case len(replies) == 0:
		return temporal.NewApplicationError(fmt.Sprintf("%s: no reply from %s within %v", rpc, identity, a.cfg.RPCTimeoutDuration), ErrTypeRPC)
	case len(replies) > 1:
		return temporal.NewApplicationError(fmt.Sprintf("%s: %d replies to a request addressed to %s", rpc, len(replies), identity), ErrTypeBadReply)
	}
	r := replies[0]
	if r.Sender() != identity {
		return temporal.NewApplicationError(fmt.Sprintf("%s: reply from %q to a request addressed to %s", rpc, r.Sender(), identity), ErrTypeBadReply)
	}
	if r.OK() {
		return nil
	}
	msg := r.StatusMessage()
	switch {
	case msg == provision.LockedError:
		return temporal.NewApplicationError(fmt.Sprintf("%s: %s (another caller holds it)", rpc, msg), ErrTypeLocked)
	case strings.Contains(msg, "not in provisioning mode"):
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %s", rpc, msg), ErrTypeNotProvisioning, nil)
	default:
		return temporal.NewApplicationError(fmt.Sprintf("%s: %s", rpc, msg), ErrTypeAborted)
	}
}

// rpc runs one request addressed to identity within timeout, checks that exactly one OK reply
// came from it, records the rpc metrics, and returns that reply.
func (a *Activities) rpc(ctx context.Context, identity, agentName, action string, timeout time.Duration, args map[string]any) (*rpcReply, error) {
	name := agentName + "#" + action
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	replies, err := a.caller.call(rctx, identity, agentName, action, args)
	switch {
	case errors.Is(err, errUndecodable):
		err = temporal.NewApplicationError(fmt.Sprintf("%s: %v", name, err), ErrTypeBadReply)
	case err == nil:
		details := make([]replyDetails, len(replies))
		for i, r := range replies {
			details[i] = r
		}
		err = a.one(identity, name, details)
	}
	a.metrics.ObserveRPC(name, start, err)
	if err != nil {
		return nil, err
	}
	return replies[0], nil
}

// provision calls a choria_provision action on one host with the RPC timeout.
func (a *Activities) provision(ctx context.Context, identity, action string, args map[string]any) (*rpcReply, error) {
	return a.rpc(ctx, identity, "choria_provision", action, a.cfg.RPCTimeoutDuration, args)
}

// outputs reads string outputs of a reply; a missing one is a bad reply.
func outputs(name string, r *rpcReply, keys ...string) ([]string, error) {
	out := make([]string, len(keys))
	for i, k := range keys {
		v, err := r.str(k)
		if err != nil {
			return nil, temporal.NewApplicationError(fmt.Sprintf("%s: %v", name, err), ErrTypeBadReply)
		}
		out[i] = v
	}
	return out, nil
}

// FetchJWT calls choria_provision#jwt and verifies the JWT against jwt_verify_cert.
func (a *Activities) FetchJWT(ctx context.Context, in HostInput) (res *JWTResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "jwt", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	reply, err := a.provision(ctx, in.Identity, "jwt", map[string]any{"token": a.cfg.Token})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	out, err := outputs("choria_provision#jwt", reply, "jwt", "ecdh_public")
	if err != nil {
		return nil, err
	}
	claims, err := VerifyProvisioningJWT(out[0], a.cfg.JWTVerifyCert)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidJWT, err)
	}
	had := claims.Token != ""
	claims.Token = ""
	return &JWTResult{Claims: claims, ECDHPublic: out[1], HadToken: had, Attempted: attempted(ctx)}, nil
}

// Gen25519 asks the server for a new ed25519 key, signing a nonce fresh to this attempt, and
// verifies the signature.
func (a *Activities) Gen25519(ctx context.Context, in HostInput) (res *ED25519Result, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "gen25519", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	nb := make([]byte, 32)
	if _, err := rand.Read(nb); err != nil {
		return nil, err
	}
	nonce := hex.EncodeToString(nb)
	r, err := a.provision(ctx, in.Identity, "gen25519", map[string]any{"nonce": nonce, "token": a.cfg.Token})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	out, err := outputs("choria_provision#gen25519", r, "public_key", "directory", "signature")
	if err != nil {
		return nil, err
	}
	if err := VerifyNonceSignature(out[0], out[2], nonce); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadSignature, err)
	}
	return &ED25519Result{PublicKey: out[0], Directory: out[1], Signature: out[2], Attempted: attempted(ctx)}, nil
}

// Gencsr asks the server for a key and CSR with its identity as common name (pki feature) and
// validates the CSR against the identity and cert_deny_list.
func (a *Activities) Gencsr(ctx context.Context, in HostInput) (res *CSRResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "gencsr", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	r, err := a.provision(ctx, in.Identity, "gencsr", map[string]any{"token": a.cfg.Token, "cn": in.Identity})
	if err != nil {
		return nil, err
	}
	out, err := outputs("choria_provision#gencsr", r, "csr", "public_key", "ssldir")
	if err != nil {
		return nil, err
	}
	if err := ValidateCSR(out[0], in.Identity, a.cfg.CertDenyList); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeCSR, err)
	}
	return &CSRResult{CSR: out[0], PublicKey: out[1], SSLDir: out[2], Attempted: attempted(ctx)}, nil
}

// Inventory calls rpcutil#inventory.
func (a *Activities) Inventory(ctx context.Context, in HostInput) (res *InventoryResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "inventory", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	r, err := a.rpc(ctx, in.Identity, "rpcutil", "inventory", a.cfg.RPCTimeoutDuration, map[string]any{})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	version, vok := r.data["version"].(string)
	upgradable, uok := r.data["upgradable"].(bool)
	if !vok || !uok {
		return nil, temporal.NewApplicationError(fmt.Sprintf("rpcutil#inventory: reply from %s has no version or upgradable", r.sender), ErrTypeBadReply)
	}
	// the helper gets the inventory as go-choria's generated client encodes its output
	j, err := json.Marshal(r.data)
	if err != nil {
		return nil, temporal.NewApplicationError(fmt.Sprintf("rpcutil#inventory: cannot encode inventory: %v", err), ErrTypeBadReply)
	}
	if err := checkInventorySize(len(j)); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadReply, err)
	}
	return &InventoryResult{Inventory: string(j), Version: version, Upgradable: upgradable, Attempted: attempted(ctx)}, nil
}

// RunHelper runs the site helper for one host.
func (a *Activities) RunHelper(ctx context.Context, req HelperRequest) (res *HelperOutput, err error) {
	retry := workflowRetryUnknown
	switch {
	case req.Attempts > 0 && req.Attempt < req.Attempts:
		retry = workflowRetries
	case req.Attempts > 0:
		retry = lastWorkflowTry
	}
	defer func() { err = a.finishRetried(ctx, req.Input.Identity, "helper", err, retry) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	input := req.Input
	if input.JWT != nil && req.HadToken {
		claims := *input.JWT
		claims.Token = a.cfg.Token
		input.JWT = &claims
	}
	start := time.Now()
	out, err := a.helper.Run(ctx, input)
	a.metrics.HelperTime.WithLabelValues(a.cfg.Site).Observe(time.Since(start).Seconds())
	if err != nil {
		a.metrics.HelperErrors.WithLabelValues(a.cfg.Site).Inc()
		return nil, temporal.NewApplicationErrorWithCause(err.Error(), ErrTypeHelper, err)
	}
	if out.Shutdown {
		a.metrics.ShutdownRequests.WithLabelValues(a.cfg.Site).Inc()
	}
	if !out.Defer && !out.Shutdown {
		if len(out.Configuration) == 0 {
			a.metrics.HelperErrors.WithLabelValues(a.cfg.Site).Inc()
			return nil, temporal.NewApplicationError("helper returned no configuration and did not defer or shut down", ErrTypeHelper)
		}
		cj, _ := json.Marshal(out.Configuration)
		if len(cj) > 2048 {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("helper configuration is %d bytes of JSON; the configure action accepts at most 2048", len(cj)), ErrTypeConfig, nil)
		}
	}
	return out, nil
}

// SignServerJWT makes the host's server JWT (ed25519 feature).
func (a *Activities) SignServerJWT(ctx context.Context, in SignInput) (signed string, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "sign", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	s, err := a.signer.Sign(in)
	if err != nil {
		return "", temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeSigning, err)
	}
	if !s.CappedAt.IsZero() {
		// the Choria Provisioner signs these too (the broker accepts them): say so once per host
		a.logger(ctx, in.Identity, "sign").Warn("server JWT expiry capped at jwt_signing_token's expiry",
			zap.Time("asked_expiry", s.Asked.UTC()), zap.Time("expiry", s.CappedAt.UTC()))
	}
	return s.JWT, nil
}

// Configure sends the configuration with choria_provision#configure.
func (a *Activities) Configure(ctx context.Context, in ConfigureInput) (res *MessageResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "configure", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	cj, err := json.Marshal(in.Configuration)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeConfig, err)
	}
	var key, keyECDH string
	if in.Key != "" {
		// a fresh provisioner ECDH pair per attempt: the server's half changes with every jwt call
		if key, keyECDH, err = EncryptKeyForServer(in.Key, in.ECDHPublic); err != nil {
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeConfig, err)
		}
	}
	args := map[string]any{"config": string(cj), "token": a.cfg.Token}
	if in.Certificate != "" {
		args["certificate"] = in.Certificate
	}
	if in.CA != "" {
		args["ca"] = in.CA
	}
	if in.SSLDir != "" {
		args["ssldir"] = in.SSLDir
	}
	if key != "" {
		args["key"], args["ecdh_public"] = key, keyECDH
	}
	if in.ServerJWT != "" {
		args["server_jwt"] = in.ServerJWT
	}
	if len(in.ActionPolicies) > 0 {
		args["action_policies"] = anyMap(in.ActionPolicies)
	}
	if len(in.OPAPolicies) > 0 {
		args["opa_policies"] = anyMap(in.OPAPolicies)
	}
	r, err := a.provision(ctx, in.Identity, "configure", args)
	if err != nil {
		return nil, err
	}
	return messageResult(ctx, r)
}

// Restart asks the server to restart into its new configuration.
func (a *Activities) Restart(ctx context.Context, in RestartInput) (res *MessageResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "restart", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	r, err := a.provision(ctx, in.Identity, "restart", map[string]any{"token": a.cfg.Token, "splay": float64(in.Splay)})
	if err != nil {
		return nil, err
	}
	a.metrics.Provisioned.WithLabelValues(a.cfg.Site).Inc()
	a.logger(ctx, in.Identity, "restart").Info("provisioned")
	return messageResult(ctx, r)
}

// ReleaseUpdate asks the server to update its binary with choria_provision#release_update; the
// server restarts into the new version (still in provisioning mode) about 2 s later.
func (a *Activities) ReleaseUpdate(ctx context.Context, in UpgradeInput) (res *MessageResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "upgrade", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	if a.cfg.UpgradesRepository == "" {
		return nil, temporal.NewNonRetryableApplicationError("upgrades_repository is not configured", ErrTypeConfig, nil)
	}
	// downloading and verifying a binary takes longer than an ordinary RPC
	r, err := a.rpc(ctx, in.Identity, "choria_provision", "release_update", 3*a.cfg.RPCTimeoutDuration,
		map[string]any{"repository": a.cfg.UpgradesRepository, "token": a.cfg.Token, "version": in.Version})
	if err != nil {
		return nil, err
	}
	return messageResult(ctx, r)
}

// Shutdown asks the server to shut down (the helper's decision).
func (a *Activities) Shutdown(ctx context.Context, in HostInput) (res *MessageResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "shutdown", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	r, err := a.provision(ctx, in.Identity, "shutdown", map[string]any{"token": a.cfg.Token})
	if err != nil {
		return nil, err
	}
	return messageResult(ctx, r)
}

// MaxInventoryBytes keeps an inventory well inside Temporal's payload limit (2 MiB by default),
// so one host's huge fact set fails that host with a reason instead of its workflow task.
const MaxInventoryBytes = 1 << 20

// ErrInventoryTooLarge is returned for inventories over MaxInventoryBytes.
var ErrInventoryTooLarge = errors.New("inventory is too large")

func checkInventorySize(n int) error {
	if n > MaxInventoryBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d (Temporal payload size): trim the server's facts", ErrInventoryTooLarge, n, MaxInventoryBytes)
	}
	return nil
}

func attempted(ctx context.Context) Attempted {
	return Attempted{Attempt: activity.GetInfo(ctx).Attempt}
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
