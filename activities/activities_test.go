package activities

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/choria-io/go-choria/inter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/metrics"
)

// The workflow refers to activities by method value, whose name Temporal takes from the method:
// every registered name must be the method's, or the workflow would schedule an unknown activity.
func TestRegisteredNamesAreTheMethodNames(t *testing.T) {
	a := &Activities{}
	typ := reflect.TypeOf(a)
	regs := a.registrations()
	require.Len(t, regs, typ.NumMethod()-2, "every exported method but Register and LocalSigner is an activity")
	for _, r := range regs {
		fn := runtime.FuncForPC(reflect.ValueOf(r.method).Pointer()).Name()
		require.True(t, strings.HasSuffix(fn, "."+r.name+"-fm"), "%s is registered as %s", fn, r.name)
		_, ok := typ.MethodByName(r.name)
		require.True(t, ok, r.name)
		require.NotEmpty(t, r.step, r.name)
	}
}

// The cross-cutting parts are applied once, at registration: the busy gauge, the attempt on the
// result and the Temporal form of an error that was not classified where it was made.
func TestRegistrationAppliesThePreambleOnce(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	a := &Activities{metrics: m, log: zap.NewNop(), set: Settings{Site: "lab"}}
	var busyInside float64
	ok := wrapNamed(a, "Probe", StepInventory, func(ctx context.Context, in HostInput) (*InventoryResult, error) {
		busyInside = testutil.ToFloat64(m.BusyWorkers.WithLabelValues("lab"))
		return &InventoryResult{Version: "1"}, nil
	})
	bad := wrapNamed(a, "Broken", StepInventory, func(ctx context.Context, in HostInput) (*InventoryResult, error) {
		return nil, errors.New("publish failed: nats: connection closed")
	})
	res, err := runAs[InventoryResult](t, HostWorkflowType, "provision:n1", ok, HostInput{Identity: "n1"})
	require.NoError(t, err)
	require.Equal(t, int32(1), res.Attempt)
	require.Equal(t, StepInventory, res.Reply.Step, "the result answers its request")
	require.Equal(t, "n1", res.Reply.Run)
	require.Equal(t, 1.0, busyInside)
	require.Equal(t, 0.0, testutil.ToFloat64(m.BusyWorkers.WithLabelValues("lab")))

	_, err = runAs[InventoryResult](t, HostWorkflowType, "provision:n1", bad, HostInput{Identity: "n1"})
	var app *temporal.ApplicationError
	require.True(t, errors.As(err, &app), "%v", err)
	require.Equal(t, ErrTypeRPC, app.Type(), "an unclassified failure is ours or the transport's")
	require.False(t, IsNoReply(err), "nothing defaults to no reply")
	require.True(t, Retryable(err))
	_, reply, _, sealed := FailureSeal(err)
	require.True(t, sealed, "the failure carries the request's seal")
	require.Equal(t, StepInventory, reply.Step)
}

// SignServerJWT is run by the workflow in its own worker only: a worker registers no activity a
// task from the queue could ask for by its name.
func TestSignServerJWTIsNotRegistered(t *testing.T) {
	a := &Activities{}
	r := &names{}
	a.Register(r)
	require.NotContains(t, r.names, SignServerJWTName)
	require.Contains(t, r.names, ConfigureName)
	require.NotNil(t, a.LocalSigner())
}

type names struct{ names []string }

func (n *names) RegisterActivityWithOptions(_ any, o activity.RegisterOptions) {
	n.names = append(n.names, o.Name)
}

func TestRetryabilityComesFromTheType(t *testing.T) {
	for _, typ := range NonRetryableErrorTypes() {
		require.False(t, Retryable(NewError(typ, "x", nil)), typ)
	}
	for _, typ := range []string{ErrTypeRPC, ErrTypeNoReply, ErrTypeLocked, ErrTypeAborted, ErrTypeBadReply, ErrTypeHelper} {
		require.True(t, Retryable(NewError(typ, "x", nil)), typ)
	}
}

// With the broker connection down, silence is not the host's: the error says so and is not
// NoReply (the workflow would take a shutdown step's NoReply for the server exiting).
func TestNoReplyOnlyWhenTheRequestCouldLeave(t *testing.T) {
	up := &Activities{set: Settings{RPCTimeout: 1}, fw: &fakeConn{up: true}}
	down := &Activities{set: Settings{RPCTimeout: 1}, fw: &fakeConn{up: false}}
	require.True(t, IsNoReply(up.one("n1", "choria_provision#shutdown", nil)))
	err := down.one("n1", "choria_provision#shutdown", nil)
	require.False(t, IsNoReply(err))
	require.Contains(t, err.Error(), "broker connection is down")
}

type fakeConn struct {
	inter.Framework
	up bool
}

func (f *fakeConn) Connected() bool { return f.up }

// silentCaller waits for its context, as a request whose reply never comes.
type silentCaller struct{}

func (silentCaller) call(ctx context.Context, _, _, _ string, _ map[string]any) ([]*rpcReply, error) {
	<-ctx.Done()
	return nil, nil
}

// waitingCaller is a silentCaller that says when a request waits for its reply.
type waitingCaller struct{ asked chan struct{} }

func (c waitingCaller) call(ctx context.Context, _, _, _ string, _ map[string]any) ([]*rpcReply, error) {
	select {
	case c.asked <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, nil
}

// An activity cancelled (or timed out) while its request waited is not the host's silence: it
// must not be a NoReply, which the workflow reads as a restarting or vanished host.
func TestCancelledRPCIsNotNoReply(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "lab")
	require.NoError(t, err)
	waiting := waitingCaller{make(chan struct{}, 1)}
	a := &Activities{set: Settings{RPCTimeout: time.Minute}, fw: &fakeConn{up: true}, caller: waiting, metrics: m, log: zap.NewNop()}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-waiting.asked; cancel() }() // cancelled once the request waits, not before it was sent
	_, err = a.rpc(ctx, "n1", "choria_provision", "restart", time.Minute, nil)
	require.Error(t, err)
	require.False(t, IsNoReply(err), "%v", err)
	require.ErrorIs(t, err, context.Canceled)

	// the RPC's own timeout, with the activity alive, is the host's silence
	_, err = a.rpc(context.Background(), "n1", "choria_provision", "restart", 20*time.Millisecond, nil)
	require.True(t, IsNoReply(err), "%v", err)
}
