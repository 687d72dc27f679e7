package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/choria-io/go-choria/providers/agent/mcorpc/golang/provision"

	"github.com/choria-temporal/provisioner/common/textsafe"
)

// MaxStatusMessageBytes bounds the status message of a host's reply as the activities keep it:
// the text reaches history, logs and operators' terminals, and it is the host's, so it is also
// cleaned of control characters and escape sequences (textsafe).
const MaxStatusMessageBytes = 256

// replyDetails is what the generated clients' ResultDetails have in common.
type replyDetails interface {
	Sender() string
	OK() bool
	StatusMessage() string
}

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
func (a *Activities) rpc(ctx context.Context, identity, agentName, action string, timeout time.Duration, args map[string]any) (*rpcReply, error) {
	name := agentName + "#" + action
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	if !a.connected() {
		// a request published now would wait in the client's reconnect buffer, past its timeout,
		// and its silence would be taken for the host's; it fails as ours instead, and retries
		err := NewError(ErrTypeRPC, fmt.Sprintf("%s: not sent to %s: the broker connection is down", name, identity), nil)
		a.metrics.ObserveRPC(name, start, err)
		return nil, err
	}
	replies, err := a.caller.call(rctx, identity, agentName, action, args)
	if cerr := ctx.Err(); cerr != nil {
		// the activity was cancelled or timed out while waiting: not the host's silence
		return nil, fmt.Errorf("%s to %s: %w", name, identity, cerr)
	}
	switch {
	case errors.Is(err, errUndecodable):
		// what could not be decoded is the sender's text
		err = NewError(ErrTypeBadReply, textsafe.Clean(fmt.Sprintf("%s: %v", name, err), 4*MaxStatusMessageBytes), nil)
	case err != nil:
		err = NewError(ErrTypeRPC, fmt.Sprintf("%s: %v", name, err), err) // the request did not go out, or its transport failed
	default:
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
	return a.rpc(ctx, identity, "choria_provision", action, a.set.RPCTimeout, args)
}

// outputs reads string outputs of a reply; a missing one is a bad reply.
func outputs(name string, r *rpcReply, keys ...string) ([]string, error) {
	out := make([]string, len(keys))
	for i, k := range keys {
		v, err := r.str(k)
		if err != nil {
			return nil, NewError(ErrTypeBadReply, fmt.Sprintf("%s: %v", name, err), nil)
		}
		out[i] = v
	}
	return out, nil
}

// message is the reply of an action whose only output is a message.
func message(r *rpcReply) *MessageResult {
	msg, _ := r.data["message"].(string)
	return &MessageResult{Message: textsafe.Clean(msg, MaxStatusMessageBytes)}
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
		return NewError(ErrTypeBadReply, fmt.Sprintf("%s: reply from %q to a request addressed to %s", rpc, textsafe.Clean(r.Sender(), MaxStatusMessageBytes), identity), nil)
	}
	if r.OK() {
		return nil
	}
	msg := r.StatusMessage()
	switch {
	case msg == provision.LockedError:
		return NewError(ErrTypeLocked, fmt.Sprintf("%s: %s (another caller holds it)", rpc, msg), nil)
	case strings.Contains(msg, "not in provisioning mode"):
		// the host's word alone: stale decides, from Temporal, whether it left provisioning mode
		return NewError(ErrTypeHostNotProvisioning, fmt.Sprintf("%s: %s", rpc, msg), nil)
	default:
		return NewError(ErrTypeAborted, fmt.Sprintf("%s: %s", rpc, msg), nil)
	}
}

// connected is true unless the framework knows its broker connection is down.
func (a *Activities) connected() bool {
	c, ok := a.fw.(connectivity)
	return !ok || c.Connected()
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
