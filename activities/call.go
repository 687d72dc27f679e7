package activities

import (
	"context"
	"fmt"
	"strings"
	"time"

	cpc "github.com/choria-io/go-choria/client/choria_provisionclient"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/golang/provision"
)

// replyDetails is what the generated clients' ResultDetails have in common.
type replyDetails interface {
	Sender() string
	OK() bool
	StatusMessage() string
}

// resulter is an output of go-choria's generated clients: each carries its reply details.
type resulter[D replyDetails] interface{ ResultDetails() D }

// connectivity is the shared framework's view of its broker connection (SharedFramework).
type connectivity interface{ Connected() bool }

// Connected is false while the shared connection is known to be down (go-choria reconnects it);
// before the first dial nothing is known, and the dial itself tells.
func (f *SharedFramework) Connected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conn == nil || f.conn.IsConnected()
}

// rpc runs one request addressed to identity within timeout, checks that exactly one OK reply
// came from it, records the rpc metrics, and returns that reply.
func rpc[O resulter[D], D replyDetails](ctx context.Context, a *Activities, identity, name string, timeout time.Duration, do func(context.Context) ([]O, error)) (O, error) {
	var zero O
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	if !a.connected() {
		// a request published now would wait in the client's reconnect buffer, past its timeout,
		// and its silence would be taken for the host's; it fails as ours instead, and retries
		err := NewError(ErrTypeRPC, fmt.Sprintf("%s: not sent to %s: the broker connection is down", name, identity), nil)
		a.metrics.ObserveRPC(name, start, err)
		return zero, err
	}
	outs, err := do(rctx)
	if err != nil {
		err = NewError(ErrTypeRPC, err.Error(), err) // the request did not go out, or its transport failed
	} else {
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

// one checks that exactly one reply came, from the addressed host, with an OK status. Silence
// is the host's only when the request could leave: with the broker connection down it is ours.
func (a *Activities) one(identity, rpc string, replies []replyDetails) error {
	switch {
	case len(replies) == 0 && !a.connected():
		return NewError(ErrTypeRPC, fmt.Sprintf("%s: no reply from %s within %v: the broker connection is down", rpc, identity, a.set.RPCTimeout), nil)
	case len(replies) == 0:
		return NewError(ErrTypeNoReply, fmt.Sprintf("%s: no reply from %s within %v", rpc, identity, a.set.RPCTimeout), nil)
	case len(replies) > 1:
		return NewError(ErrTypeBadReply, fmt.Sprintf("%s: %d replies to a request addressed to %s", rpc, len(replies), identity), nil)
	}
	r := replies[0]
	if r.Sender() != identity {
		return NewError(ErrTypeBadReply, fmt.Sprintf("%s: reply from %q to a request addressed to %s", rpc, r.Sender(), identity), nil)
	}
	if r.OK() {
		return nil
	}
	msg := r.StatusMessage()
	switch {
	case msg == provision.LockedError:
		return NewError(ErrTypeLocked, fmt.Sprintf("%s: %s (another caller holds it)", rpc, msg), nil)
	case strings.Contains(msg, "not in provisioning mode"):
		return NewError(ErrTypeNotProvisioning, fmt.Sprintf("%s: %s", rpc, msg), nil)
	default:
		return NewError(ErrTypeAborted, fmt.Sprintf("%s: %s", rpc, msg), nil)
	}
}

// connected is true unless the framework knows its broker connection is down.
func (a *Activities) connected() bool {
	c, ok := a.fw.(connectivity)
	return !ok || c.Connected()
}

// callProvision calls a choria_provision action on one host with the RPC timeout.
func callProvision[O resulter[*cpc.ResultDetails]](ctx context.Context, a *Activities, identity, action string, req func(context.Context, *cpc.ChoriaProvisionClient) ([]O, error)) (O, error) {
	return callWithin(ctx, a, identity, action, a.set.RPCTimeout, req)
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

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
