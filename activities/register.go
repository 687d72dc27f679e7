package activities

import (
	"context"
	"reflect"
	"runtime"
	"strings"

	"go.temporal.io/sdk/activity"
)

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

// registrations is the one table of activities: the step each serves and its method, whose
// name is the activity's (the workflow refers to activities by method value).
func (a *Activities) registrations() []registration {
	sign := wrap(a, StepSign, a.SignServerJWT)
	sign.local = true
	return []registration{
		wrap(a, StepJWT, a.FetchJWT),
		wrap(a, StepGen25519, a.Gen25519),
		wrap(a, StepGencsr, a.Gencsr),
		wrap(a, StepInventory, a.Inventory),
		wrap(a, StepHelper, a.RunHelper),
		sign,
		wrap(a, StepConfigure, a.Configure),
		wrap(a, StepRestart, a.Restart),
		wrap(a, StepUpgrade, a.ReleaseUpdate),
		wrap(a, StepShutdown, a.Shutdown),
	}
}

// methodName is the name of a method value's method: the activity's registered name, the name
// the workflow schedules it by (it refers to it by method value).
func methodName(fn any) string {
	name := strings.TrimSuffix(runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name(), "-fm")
	return name[strings.LastIndex(name, ".")+1:]
}

// Registered is one activity of the registrations: its name and the step it serves.
type Registered struct {
	Name, Step string
}

// Catalog is every activity the worker has, by name and step: what the workflow's step table
// must agree with (a test in workflows holds them to each other).
func Catalog() []Registered {
	regs := (&Activities{}).registrations()
	out := make([]Registered, len(regs))
	for i, r := range regs {
		out[i] = Registered{Name: r.name, Step: r.step}
	}
	return out
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
func wrap[I sealedInput, O any](a *Activities, step string, fn func(context.Context, I) (O, error)) registration {
	return wrapNamed(a, methodName(fn), step, fn)
}

// wrapNamed is wrap under a name of the caller's choosing (tests wrap functions, not methods).
func wrapNamed[I sealedInput, O any](a *Activities, name, step string, fn func(context.Context, I) (O, error)) registration {
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
