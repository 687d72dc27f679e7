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
		helper:   &HelperRunner{Command: set.HelperCommand, Timeout: set.HelperTimeout, Env: set.HelperEnv},
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

// Registry is where activities are registered: a Temporal worker.
type Registry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// registration is one activity: its name, the step it serves, the method, and the method
// wrapped in the cross-cutting parts every activity shares. A local one is run by the workflow
// in its own worker only (LocalSigner), never registered for tasks from the queue.
type registration struct {
	name, step string
	method     any
	wrapped    any
	local      bool
}

// registrations is the one table of activities; names equal the method names, because the
// workflow refers to the activities by method value (a test checks it).
func (a *Activities) registrations() []registration {
	sign := wrap(a, SignServerJWTName, StepSign, a.SignServerJWT)
	sign.local = true
	return []registration{
		wrap(a, FetchJWTName, StepJWT, a.FetchJWT),
		wrap(a, Gen25519Name, StepGen25519, a.Gen25519),
		wrap(a, GencsrName, StepGencsr, a.Gencsr),
		wrap(a, InventoryName, StepInventory, a.Inventory),
		wrap(a, RunHelperName, StepHelper, a.RunHelper),
		sign,
		wrap(a, ConfigureName, StepConfigure, a.Configure),
		wrap(a, RestartName, StepRestart, a.Restart),
		wrap(a, ReleaseUpdateName, StepUpgrade, a.ReleaseUpdate),
		wrap(a, ShutdownName, StepShutdown, a.Shutdown),
	}
}

// Register registers every activity the task queue may ask for on r. SignServerJWT is not one of
// them: the workflow signs in a local activity (LocalSigner), so a task for it on the queue,
// whoever scheduled it, finds no activity and signs nothing.
func (a *Activities) Register(r Registry) {
	for _, reg := range a.registrations() {
		if !reg.local {
			r.RegisterActivityWithOptions(reg.wrapped, activity.RegisterOptions{Name: reg.name})
		}
	}
}

// LocalSigner is SignServerJWT for the workflow's local activity, with every activity's wrapper.
type LocalSigner struct {
	sign func(context.Context, SignInput) (*SignResult, error)
}

// LocalSigner is the signer the workflow of this worker runs as a local activity.
func (a *Activities) LocalSigner() *LocalSigner {
	for _, reg := range a.registrations() {
		if reg.name == SignServerJWTName {
			return &LocalSigner{sign: reg.wrapped.(func(context.Context, SignInput) (*SignResult, error))}
		}
	}
	panic("activities: no SignServerJWT registration")
}

// SignServerJWT signs as Activities.SignServerJWT does, behind the checks every activity makes;
// its method value carries the activity's name into the workflow's history.
func (s *LocalSigner) SignServerJWT(ctx context.Context, in SignInput) (*SignResult, error) {
	return s.sign(ctx, in)
}

// wrap applies what every activity does around its own work: the refusal of tasks that are not
// a host workflow's for its own host (admit) or whose input its run did not seal for this step
// (checkRequest), the busy gauge, the heartbeat, the attempt and the request's seal on the
// result, and the error's Temporal form, seal, count and log line (finish).
func wrap[I sealedInput, O any](a *Activities, name, step string, fn func(context.Context, I) (O, error)) registration {
	wrapped := func(ctx context.Context, in I) (O, error) {
		var zero O
		attempt := activity.GetInfo(ctx).Attempt
		if err := a.admit(ctx, name, step, in); err != nil {
			return zero, SealFailure(err, attempt, in.GetRequest())
		}
		done := a.busy()
		stop := Heartbeat(ctx)
		out, err := fn(ctx, in)
		stop()
		done()
		if err != nil {
			return zero, SealFailure(a.finish(ctx, in, step, err), attempt, in.GetRequest())
		}
		if r, ok := any(out).(interface {
			setAttempt(int32)
			SetReply(Seal)
		}); ok {
			r.setAttempt(attempt)
			r.SetReply(in.GetRequest())
		}
		return out, nil
	}
	return registration{name: name, step: step, method: fn, wrapped: wrapped}
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
