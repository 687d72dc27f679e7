package activities

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.uber.org/zap"

	"github.com/choria-io/go-choria/inter"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/common/metrics"
)

// Activities holds what every activity needs for the life of the worker process: one Choria
// framework, the helper runner and the server JWT signer. Create it once per process and
// Register it on each worker.
type Activities struct {
	fw      inter.Framework
	set     Settings
	helper  *HelperRunner
	signer  *ServerJWTSigner
	metrics *metrics.Metrics
	log     *zap.Logger
	runs    RunHistory
	caller  rpcCaller
	helpers *HelperSlots // nil: helper runs unbounded
	// secrets seals the helper's private keys for history (nil: a helper key fails its host)
	secrets *SecretBox
	// audit takes every issuance before it is sent (nil: no audit sink)
	audit         Auditor
	auditFailOpen bool
	bans          Bans // nil: no ban list
	// refusals logs refused tasks once per reason and interval (nil: every one)
	refusals *logging.Summary
}

// Option adds an optional dependency to Activities.
type Option func(*Activities)

// New builds the activities over an established Choria client framework.
func New(fw inter.Framework, set Settings, m *metrics.Metrics, log *zap.Logger, opts ...Option) *Activities {
	a := &Activities{
		fw:       fw,
		set:      set,
		helper:   &HelperRunner{Command: set.HelperCommand, Timeout: set.HelperTimeout, Env: set.HelperEnv, Credential: set.HelperCredential},
		signer:   &ServerJWTSigner{SigningKey: set.JWTSigningKey, SigningToken: set.JWTSigningToken, DefaultValidity: set.ServerJWTValidity},
		metrics:  m,
		log:      log,
		refusals: logging.NewSummary(log, "task refused", 0),
	}
	for _, o := range opts {
		o(a)
	}
	a.caller = newCaller(fw, log)
	return a
}

func (a *Activities) logger(ctx context.Context, identity, step string) *zap.Logger {
	info := activity.GetInfo(ctx)
	return a.log.With(zap.String(logging.FieldIdentity, identity),
		zap.String(logging.FieldStep, step), zap.Int32(logging.FieldAttempt, info.Attempt))
}

// busy counts the step in choria_provisioner_busy_workers until the returned func runs.
func (a *Activities) busy() func() {
	g := a.metrics.BusyWorkers.WithLabelValues(a.set.Site)
	g.Inc()
	return g.Dec
}

// HeartbeatEvery is how often a step that runs long tells Temporal its worker is alive. Steps
// run with a heartbeat timeout, so the steps of a worker that died are retried elsewhere within
// seconds instead of after their start-to-close timeout. A step done sooner sends none.
const HeartbeatEvery = 2 * time.Second

// Heartbeat beats every HeartbeatEvery until the returned func runs. A timer, not a goroutine
// with a ticker: most steps end long before their first beat, and then cost no goroutine at all.
func Heartbeat(ctx context.Context) func() {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(HeartbeatEvery, func() {
		if ctx.Err() != nil {
			return
		}
		activity.RecordHeartbeat(ctx)
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(HeartbeatEvery)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}
