package fleetsim

import (
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/choria-io/go-choria/lifecycle"
	"github.com/choria-io/go-choria/protocol"
	"github.com/choria-io/go-choria/providers/agent/mcorpc"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/golang/provision"
)

// Renewable hosts (Options.Renewable) stand in for provisioned servers that renewal reaches: a
// real provisioned server answers choria_provision#reprovision on its fleet collective, which the
// simulator has no connection to, so a renewable host that left provisioning mode answers that
// one action on the provisioning subjects instead, and nothing else. It then goes back into
// provisioning mode after go-choria's 2-11 s splay (its configuration gone, a startup event), to
// be provisioned again.

// answerProvisioned is a restarted host's reply: reprovision only (ok false: no reply).
func (h *Host) answerProvisioned(f *Fleet, req protocol.Request, rpc *mcorpc.Request, reply *mcorpc.Reply) ([]byte, bool) {
	if req.Agent() != "choria_provision" || rpc.Action != "reprovision" {
		return nil, false
	}
	args := &provision.ReprovisionRequest{}
	if !mcorpc.ParseRequestData(args, rpc, reply) {
		return marshal(reply)
	}
	if f.opts.Token != "" && args.Token != f.opts.Token {
		abort("Incorrect provision token supplied", reply)
		return marshal(reply)
	}
	splay := time.Duration(mrand.N(10)+2) * time.Second
	if f.opts.NoRestartSplay {
		splay = 0
	}
	reply.Data = provision.Reply{Message: fmt.Sprintf("Restarting after %v", splay)}
	f.backToProvisioning(h, splay)
	return marshal(reply)
}

// backToProvisioning restarts a provisioned host into provisioning mode after splay, once
// however many reprovision requests arrive meanwhile (go-choria restarts once too).
func (f *Fleet) backToProvisioning(h *Host, splay time.Duration) {
	h.mu.Lock()
	if h.reprovisioning {
		h.mu.Unlock()
		return
	}
	h.reprovisioning = true
	h.mu.Unlock()
	f.event(h, lifecycle.Shutdown, serverComponent)
	time.AfterFunc(splay, func() {
		h.mu.Lock()
		h.reprovisioning, h.restarting, h.lockedBy, h.lockedUntil, h.ecdhPri, h.Config = false, false, "", time.Time{}, nil, nil
		h.mu.Unlock()
		h.Reprovisions.Add(1)
		h.Restarted.Store(false)
		f.changed()
		f.event(h, lifecycle.Startup, provisionComponent)
	})
}
