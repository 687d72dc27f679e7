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

	cpc "github.com/choria-io/go-choria/client/choria_provisionclient"
	"github.com/choria-io/go-choria/client/rpcutilclient"
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
	return a
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

// finish turns an activity error into its Temporal form, counts it, and logs it.
func (a *Activities) finish(ctx context.Context, identity, step string, err error) error {
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
	last := appErr.NonRetryable()
	// carry the attempt to the workflow's timeline
	err = temporal.NewApplicationErrorWithOptions(appErr.Message(), appErr.Type(), temporal.ApplicationErrorOptions{
		NonRetryable: appErr.NonRetryable(), Cause: errors.Unwrap(appErr), Details: []any{info.Attempt},
	})
	if rp := info.RetryPolicy; rp != nil && rp.MaximumAttempts > 0 && info.Attempt >= rp.MaximumAttempts {
		last = true
	}
	if last {
		a.metrics.ProvisionErrors.WithLabelValues(a.cfg.Site).Inc()
		log.Error("step failed, no retries left", zap.Error(err))
	} else {
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

// resulter is an output of go-choria's generated clients: each carries its reply details.
type resulter[D replyDetails] interface{ ResultDetails() D }

// rpc runs one request addressed to identity within timeout, checks that exactly one OK reply
// came from it, records the rpc metrics, and returns that reply.
func rpc[O resulter[D], D replyDetails](ctx context.Context, a *Activities, identity, name string, timeout time.Duration, do func(context.Context) ([]O, error)) (O, error) {
	var zero O
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	outs, err := do(rctx)
	if err == nil {
		details := make([]replyDetails, len(outs))
		for i, o := range outs {
			details[i] = o.ResultDetails()
		}
		err = a.one(identity, name, details)
	}
	a.metrics.ObserveRPC(name, start, err)
	if err != nil {
		return zero, err
	}
	return outs[0], nil
}

// callProvision calls a choria_provision action on one host with the RPC timeout.
func callProvision[O resulter[*cpc.ResultDetails]](ctx context.Context, a *Activities, identity, action string, req func(context.Context, *cpc.ChoriaProvisionClient) ([]O, error)) (O, error) {
	return callWithin(ctx, a, identity, action, a.cfg.RPCTimeoutDuration, req)
}

func callWithin[O resulter[*cpc.ResultDetails]](ctx context.Context, a *Activities, identity, action string, timeout time.Duration, req func(context.Context, *cpc.ChoriaProvisionClient) ([]O, error)) (O, error) {
	return rpc(ctx, a, identity, "choria_provision#"+action, timeout, func(ctx context.Context) ([]O, error) {
		// a client per call: the generated clients' option setters mutate them
		pc, err := cpc.New(a.fw)
		if err != nil {
			return nil, err
		}
		// one reply is expected: one receiver, not rpcclient's default of three subscriptions
		return req(ctx, pc.OptionTargets([]string{identity}).OptionWorkers(1))
	})
}

// do adapts a generated requester's Do to the outputs rpc wants.
func do[R interface{ AllOutputs() []O }, O any](ctx context.Context, r interface {
	Do(context.Context) (R, error)
}) ([]O, error) {
	res, err := r.Do(ctx)
	if err != nil {
		return nil, err
	}
	return res.AllOutputs(), nil
}

// FetchJWT calls choria_provision#jwt and verifies the JWT against jwt_verify_cert.
func (a *Activities) FetchJWT(ctx context.Context, in HostInput) (res *JWTResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "jwt", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	reply, err := callProvision(ctx, a, in.Identity, "jwt", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.JwtOutput, error) {
		return do[*cpc.JwtResult, *cpc.JwtOutput](ctx, pc.Jwt(a.cfg.Token))
	})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	claims, err := VerifyProvisioningJWT(reply.Jwt(), a.cfg.JWTVerifyCert)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidJWT, err)
	}
	had := claims.Token != ""
	claims.Token = ""
	return &JWTResult{Claims: claims, ECDHPublic: reply.EcdhPublic(), HadToken: had, Attempted: attempted(ctx)}, nil
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
	r, err := callProvision(ctx, a, in.Identity, "gen25519", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.Gen25519Output, error) {
		return do[*cpc.Gen25519Result, *cpc.Gen25519Output](ctx, pc.Gen25519(nonce, a.cfg.Token))
	})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	if err := VerifyNonceSignature(r.PublicKey(), r.Signature(), nonce); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadSignature, err)
	}
	return &ED25519Result{PublicKey: r.PublicKey(), Directory: r.Directory(), Signature: r.Signature(), Attempted: attempted(ctx)}, nil
}

// Gencsr asks the server for a key and CSR with its identity as common name (pki feature) and
// validates the CSR against the identity and cert_deny_list.
func (a *Activities) Gencsr(ctx context.Context, in HostInput) (res *CSRResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "gencsr", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	r, err := callProvision(ctx, a, in.Identity, "gencsr", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.GencsrOutput, error) {
		return do[*cpc.GencsrResult, *cpc.GencsrOutput](ctx, pc.Gencsr(a.cfg.Token).Cn(in.Identity))
	})
	if err != nil {
		return nil, err
	}
	if err := ValidateCSR(r.Csr(), in.Identity, a.cfg.CertDenyList); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeCSR, err)
	}
	return &CSRResult{CSR: r.Csr(), PublicKey: r.PublicKey(), SSLDir: r.Ssldir(), Attempted: attempted(ctx)}, nil
}

// Inventory calls rpcutil#inventory.
func (a *Activities) Inventory(ctx context.Context, in HostInput) (res *InventoryResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "inventory", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	r, err := rpc(ctx, a, in.Identity, "rpcutil#inventory", a.cfg.RPCTimeoutDuration, func(ctx context.Context) ([]*rpcutilclient.InventoryOutput, error) {
		rc, err := rpcutilclient.New(a.fw)
		if err != nil {
			return nil, err
		}
		return do[*rpcutilclient.InventoryResult, *rpcutilclient.InventoryOutput](ctx, rc.OptionTargets([]string{in.Identity}).OptionWorkers(1).Inventory())
	})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	j, err := r.JSON()
	if err != nil {
		return nil, temporal.NewApplicationError(fmt.Sprintf("rpcutil#inventory: cannot encode inventory: %v", err), ErrTypeBadReply)
	}
	if err := checkInventorySize(len(j)); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadReply, err)
	}
	return &InventoryResult{Inventory: string(j), Version: r.Version(), Upgradable: r.Upgradable(), Attempted: attempted(ctx)}, nil
}

// RunHelper runs the site helper for one host.
func (a *Activities) RunHelper(ctx context.Context, req HelperRequest) (res *HelperOutput, err error) {
	defer func() { err = a.finish(ctx, req.Input.Identity, "helper", err) }()
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
	r, err := callProvision(ctx, a, in.Identity, "configure", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.ConfigureOutput, error) {
		req := pc.Configure(string(cj)).Token(a.cfg.Token)
		if in.Certificate != "" {
			req = req.Certificate(in.Certificate)
		}
		if in.CA != "" {
			req = req.Ca(in.CA)
		}
		if in.SSLDir != "" {
			req = req.Ssldir(in.SSLDir)
		}
		if key != "" {
			req = req.Key(key).EcdhPublic(keyECDH)
		}
		if in.ServerJWT != "" {
			req = req.ServerJwt(in.ServerJWT)
		}
		if len(in.ActionPolicies) > 0 {
			req = req.ActionPolicies(anyMap(in.ActionPolicies))
		}
		if len(in.OPAPolicies) > 0 {
			req = req.OpaPolicies(anyMap(in.OPAPolicies))
		}
		return do[*cpc.ConfigureResult, *cpc.ConfigureOutput](ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &MessageResult{Message: r.Message(), Attempted: attempted(ctx)}, nil
}

// Restart asks the server to restart into its new configuration.
func (a *Activities) Restart(ctx context.Context, in RestartInput) (res *MessageResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "restart", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	r, err := callProvision(ctx, a, in.Identity, "restart", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.RestartOutput, error) {
		return do[*cpc.RestartResult, *cpc.RestartOutput](ctx, pc.Restart(a.cfg.Token).Splay(float64(in.Splay)))
	})
	if err != nil {
		return nil, err
	}
	a.metrics.Provisioned.WithLabelValues(a.cfg.Site).Inc()
	a.logger(ctx, in.Identity, "restart").Info("provisioned")
	return &MessageResult{Message: r.Message(), Attempted: attempted(ctx)}, nil
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
	r, err := callWithin(ctx, a, in.Identity, "release_update", 3*a.cfg.RPCTimeoutDuration, func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.ReleaseUpdateOutput, error) {
		return do[*cpc.ReleaseUpdateResult, *cpc.ReleaseUpdateOutput](ctx, pc.ReleaseUpdate(a.cfg.UpgradesRepository, a.cfg.Token, in.Version))
	})
	if err != nil {
		return nil, err
	}
	return &MessageResult{Message: r.Message(), Attempted: attempted(ctx)}, nil
}

// Shutdown asks the server to shut down (the helper's decision).
func (a *Activities) Shutdown(ctx context.Context, in HostInput) (res *MessageResult, err error) {
	defer func() { err = a.finish(ctx, in.Identity, "shutdown", err) }()
	defer a.busy()()
	defer heartbeat(ctx)()
	r, err := callProvision(ctx, a, in.Identity, "shutdown", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.ShutdownOutput, error) {
		return do[*cpc.ShutdownResult, *cpc.ShutdownOutput](ctx, pc.Shutdown(a.cfg.Token))
	})
	if err != nil {
		return nil, err
	}
	return &MessageResult{Message: r.Message(), Attempted: attempted(ctx)}, nil
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
