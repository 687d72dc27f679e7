package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/choria-io/go-choria/client/choria_provisionclient"
	"github.com/choria-io/go-choria/client/rpcutilclient"
	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/providers/agent/mcorpc"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/ddl/agent"
	"go.uber.org/zap"
)

// rpcReply is one host's reply to one request: what go-choria's generated clients would have
// given the activity, the same for both ways of sending it.
type rpcReply struct {
	sender string
	code   int
	msg    string
	// data is the action's DDL output defaults overlaid with the reply's data, as go-choria's
	// generated clients build their outputs (the inventory goes to the helper as this map's JSON).
	data map[string]any
}

func (r *rpcReply) Sender() string        { return r.sender }
func (r *rpcReply) OK() bool              { return mcorpc.StatusCode(r.code) == mcorpc.OK }
func (r *rpcReply) StatusMessage() string { return r.msg }

// str is a string output; a missing or mistyped one is a bad reply (the generated clients panic).
func (r *rpcReply) str(key string) (string, error) {
	s, ok := r.data[key].(string)
	if !ok {
		return "", fmt.Errorf("reply from %s has no string %q: %w", r.sender, key, errBadOutput)
	}
	return s, nil
}

var errBadOutput = errors.New("unexpected reply data")

// agentDDLs are the DDLs of the agents the activities call, parsed once per process: their input
// defaults go into every request and their output defaults under every reply, as in go-choria's
// generated clients, which parse them on every call.
type agentDDLs map[string]*agent.DDL

func loadDDLs() (agentDDLs, error) {
	pd, err := choria_provisionclient.DDL()
	if err != nil {
		return nil, fmt.Errorf("choria_provision DDL: %w", err)
	}
	ud, err := rpcutilclient.DDL()
	if err != nil {
		return nil, fmt.Errorf("rpcutil DDL: %w", err)
	}
	return agentDDLs{pd.Metadata.Name: pd, ud.Metadata.Name: ud}, nil
}

// withDefaults fills args with the action's input defaults, as the generated clients do.
func (d agentDDLs) withDefaults(agentName, action string, args map[string]any) (*agent.DDL, error) {
	ddl, ok := d[agentName]
	if !ok {
		return nil, fmt.Errorf("no DDL for agent %s", agentName)
	}
	act, err := ddl.ActionInterface(action)
	if err != nil {
		return nil, err
	}
	_ = act.SetDefaults(args) // never fails
	return ddl, nil
}

// rpcCaller sends one request to one host and returns its replies (none when it did not answer
// within ctx).
type rpcCaller interface {
	call(ctx context.Context, identity, agentName, action string, args map[string]any) ([]*rpcReply, error)
}

var errUndecodable = errors.New("bad reply")

// failingCaller fails every request with err.
type failingCaller struct{ err error }

func (f failingCaller) call(context.Context, string, string, string, map[string]any) ([]*rpcReply, error) {
	return nil, f.err
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
