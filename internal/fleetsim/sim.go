// Package fleetsim simulates many Choria Servers in provisioning mode in one process: it answers
// the choria_provision, rpcutil and discovery agents on the wire as go-choria 0.30.2 servers do,
// with go-choria's own protocol v2 packages, for thousands of identities over one NATS connection
// (the broker lets a provisioning connection subscribe provisioning.node.>). Each simulated host
// has its own identity, keys and lock, publishes startup events, and after configure and restart
// leaves the provisioning collective as a real server does.
package fleetsim

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/choria-io/go-choria/choria"
	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/lifecycle"
	"github.com/choria-io/go-choria/protocol"
	v2 "github.com/choria-io/go-choria/protocol/v2"
	"github.com/choria-io/go-choria/providers/agent/mcorpc"
	cs "github.com/choria-io/go-choria/providers/security/choria"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// Options describe a simulated fleet.
type Options struct {
	BrokerURL       string
	ProvisioningJWT string // file: the fleet's provisioning JWT (connection credentials and jwt reply)
	Token           string // provisioning token the servers expect ("" for none)
	Prefix          string
	Count           int
	Version         string        // reported by rpcutil#inventory
	Latency         time.Duration // added before every reply
	// Share of hosts (0..1) that never answer: vanished hosts.
	Silent float64
	// Share of hosts whose first RPC of each kind is answered with the provisioning lock error.
	LockErrors float64
}

// Host is one simulated server.
type Host struct {
	Identity    string
	mu          sync.Mutex
	silent      bool
	lockFail    map[string]bool
	lockedBy    string
	lockedUntil time.Time
	ecdhPri     []byte
	ecdhPub     []byte
	seed        ed25519.PrivateKey
	Config      map[string]string // what configure wrote
	ServerJWT   string
	Restarted   atomic.Bool // restarted out of provisioning mode: answers nothing more
	Configured  atomic.Bool
	Configures  atomic.Int32 // configure calls that wrote a configuration
}

// Fleet is a running simulation.
type Fleet struct {
	opts     Options
	nc       *nats.Conn
	security inter.SecurityProvider
	jwt      []byte
	hosts    map[string]*Host
	order    []*Host
	Replies  atomic.Int64
}

// Start connects to the broker and serves opts.Count hosts; startup events are published for
// each (all at once when rate is 0, else rate per second) until ctx ends.
func Start(ctx context.Context, o Options, rate float64) (*Fleet, error) {
	jwt, err := os.ReadFile(o.ProvisioningJWT)
	if err != nil {
		return nil, err
	}
	sec, err := cs.New(cs.WithConfig(&cs.Config{TokenFile: o.ProvisioningJWT, DisableTLSVerify: true}), cs.WithLog(logrus.NewEntry(logrus.New())))
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	f := &Fleet{opts: o, security: sec, jwt: jwt, hosts: map[string]*Host{}}
	if f.opts.Version == "" {
		f.opts.Version = "0.30.2"
	}
	for i := 0; i < o.Count; i++ {
		h := &Host{Identity: fmt.Sprintf("%ssim-%05d.example", o.Prefix, i), lockFail: map[string]bool{}}
		// deterministic shares: every k-th host, so a run is repeatable
		if o.Silent > 0 && math.Mod(float64(i), math.Max(1, math.Round(1/o.Silent))) == 0 {
			h.silent = true
		}
		if o.LockErrors > 0 && math.Mod(float64(i), math.Max(1, math.Round(1/o.LockErrors))) == 0 {
			for _, a := range []string{"jwt", "gen25519", "configure"} {
				h.lockFail[a] = true
			}
		}
		f.hosts[h.Identity] = h
		f.order = append(f.order, h)
	}

	f.nc, err = nats.Connect(o.BrokerURL, nats.Token(strings.TrimSpace(string(jwt))), nats.Secure(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // provisioning connects unverified, as go-choria does
		nats.Name("fleetsim"), nats.MaxReconnects(-1), nats.CustomInboxPrefix("provisioning.reply.fleetsim"))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", o.BrokerURL, err)
	}
	for _, subj := range []string{"provisioning.node.>", "provisioning.broadcast.agent.choria_provision", "provisioning.broadcast.agent.discovery", "provisioning.broadcast.agent.rpcutil"} {
		if _, err := f.nc.Subscribe(subj, f.handle); err != nil {
			f.nc.Close()
			return nil, err
		}
	}
	if err := f.nc.Flush(); err != nil {
		return nil, err
	}
	go f.announce(ctx, rate)
	go func() { <-ctx.Done(); f.nc.Close() }()
	return f, nil
}

// Hosts are the simulated servers in identity order.
func (f *Fleet) Hosts() []*Host { return f.order }

func (f *Fleet) announce(ctx context.Context, rate float64) {
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
	for _, h := range f.order {
		if tick != nil {
			select {
			case <-ctx.Done():
				return
			case <-tick:
			}
		}
		ev, err := lifecycle.New(lifecycle.Startup, lifecycle.Identity(h.Identity), lifecycle.Component("provision_mode_server"), lifecycle.Version(f.opts.Version))
		if err == nil {
			_ = lifecycle.PublishEvent(ev, rawConn{f.nc})
		}
	}
}

type rawConn struct{ nc *nats.Conn }

func (r rawConn) PublishRaw(target string, data []byte) error { return r.nc.Publish(target, data) }
func (r rawConn) PublishRawMsg(msg *nats.Msg) error           { return r.nc.PublishMsg(msg) }
func (r rawConn) RequestRawMsgWithContext(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	return r.nc.RequestMsgWithContext(ctx, msg)
}

func (f *Fleet) handle(m *nats.Msg) {
	tm, err := v2.NewTransportFromJSON(m.Data)
	if err != nil {
		return
	}
	sreq, err := v2.NewSecureRequestFromTransport(tm, f.security, true)
	if err != nil {
		return
	}
	req, err := v2.NewRequestFromSecureRequest(sreq)
	if err != nil {
		return
	}
	var targets []*Host
	if id, ok := strings.CutPrefix(m.Subject, "provisioning.node."); ok {
		if h := f.hosts[id]; h != nil {
			targets = append(targets, h)
		}
	} else {
		targets = f.order
	}
	for _, h := range targets {
		if h.silent || h.Restarted.Load() {
			continue
		}
		go f.reply(h, req, tm.ReplyTo())
	}
}

func (f *Fleet) reply(h *Host, req protocol.Request, replyTo string) {
	if f.opts.Latency > 0 {
		time.Sleep(f.opts.Latency)
	}
	body, ok := h.answer(f, req)
	if !ok {
		return
	}
	rep, err := v2.NewReply(req, h.Identity)
	if err != nil {
		return
	}
	rep.SetMessage(body)
	srep, err := v2.NewSecureReply(rep, f.security)
	if err != nil {
		return
	}
	tm, err := v2.NewTransportMessage(h.Identity)
	if err != nil {
		return
	}
	if err := tm.SetReplyData(srep); err != nil {
		return
	}
	j, err := tm.JSON()
	if err != nil {
		return
	}
	if f.nc.Publish(replyTo, j) == nil {
		f.Replies.Add(1)
	}
}

// answer returns the reply body a go-choria server would send; ok false for no reply.
func (h *Host) answer(f *Fleet, req protocol.Request) ([]byte, bool) {
	if req.Agent() == "discovery" {
		// a discovery ping answers with "pong" when the filter's agents are ones we serve
		filter, ok := req.Filter()
		if !ok || filter == nil {
			return []byte("pong"), true
		}
		if agents := filter.AgentFilters(); len(agents) > 0 {
			for _, a := range agents {
				if a != "choria_provision" && a != "rpcutil" && a != "discovery" {
					return nil, false
				}
			}
		}
		return []byte("pong"), true
	}
	var rpc struct {
		Agent  string          `json:"agent"`
		Action string          `json:"action"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(req.Message(), &rpc); err != nil {
		return nil, false
	}
	reply := &mcorpc.Reply{Statuscode: mcorpc.OK, Statusmsg: "OK"}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch req.Agent() + "#" + rpc.Action {
	case "rpcutil#inventory":
		reply.Data = map[string]any{
			"agents": []string{"choria_provision", "choria_util", "discovery", "rpcutil"}, "classes": []string{},
			"collectives": []string{"provisioning"}, "data_plugins": []string{}, "facts": map[string]any{"simulated": true},
			"machines": map[string]any{}, "main_collective": "provisioning", "version": f.opts.Version, "upgradable": false,
		}
	case "rpcutil#ping":
		reply.Data = map[string]any{"pong": time.Now().Unix()}
	case "choria_provision#jwt", "choria_provision#gen25519", "choria_provision#gencsr", "choria_provision#configure", "choria_provision#release_update":
		if !h.lock(req.SenderID()+"."+req.CallerID(), rpc.Action) {
			return abort(reply, "Could not obtain provisioning lock")
		}
		var args map[string]any
		_ = json.Unmarshal(rpc.Data, &args)
		if f.opts.Token != "" && args["token"] != f.opts.Token {
			return abort(reply, "Incorrect provision token supplied")
		}
		switch rpc.Action {
		case "jwt":
			pri, pub, err := choria.ECDHKeyPair()
			if err != nil {
				return abort(reply, err.Error())
			}
			h.ecdhPri, h.ecdhPub = pri, pub
			reply.Data = map[string]any{"jwt": string(f.jwt), "ecdh_public": hex.EncodeToString(pub)}
		case "gen25519":
			pub, pri, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return abort(reply, err.Error())
			}
			h.seed = pri
			nonce, _ := args["nonce"].(string)
			reply.Data = map[string]any{"public_key": hex.EncodeToString(pub), "directory": "/etc/choria/" + h.Identity,
				"signature": hex.EncodeToString(ed25519.Sign(pri, []byte(nonce)))}
		case "configure":
			cfg, _ := args["config"].(string)
			settings := map[string]string{}
			if err := json.Unmarshal([]byte(cfg), &settings); err != nil || len(settings) == 0 {
				return abort(reply, "Did not receive any configuration to write, cannot write a empty configuration file")
			}
			h.Config = settings
			h.ServerJWT, _ = args["server_jwt"].(string)
			h.Configured.Store(true)
			h.Configures.Add(1)
			reply.Data = map[string]any{"message": fmt.Sprintf("Wrote %d lines to /etc/choria/%s/server.conf", len(settings)+1, h.Identity)}
		default:
			return abort(reply, fmt.Sprintf("%s is not simulated", rpc.Action))
		}
	case "choria_provision#restart":
		if !h.Configured.Load() {
			return abort(reply, "Configuration /etc/choria/server.conf enables provisioning, restart cannot continue")
		}
		go func() { time.Sleep(2 * time.Second); h.Restarted.Store(true) }()
		reply.Data = map[string]any{"message": "Restarting Choria Server after 2s"}
	case "choria_provision#shutdown":
		h.Restarted.Store(true)
		reply.Data = map[string]any{"message": "Shutting down Choria Server"}
	default:
		reply.Statuscode, reply.Statusmsg = mcorpc.UnknownAction, "Unknown action "+rpc.Action
	}
	b, err := json.Marshal(reply)
	return b, err == nil
}

func abort(reply *mcorpc.Reply, msg string) ([]byte, bool) {
	reply.Statuscode, reply.Statusmsg, reply.Data = mcorpc.Aborted, msg, nil
	b, err := json.Marshal(reply)
	return b, err == nil
}

// lock is the agent's provisioning lock: one caller for two minutes; a lock-error host refuses
// the first call of each locked action once.
func (h *Host) lock(caller, action string) bool {
	if h.lockFail[action] {
		delete(h.lockFail, action)
		return false
	}
	if h.lockedBy != "" && h.lockedBy != caller && time.Now().Before(h.lockedUntil) {
		return false
	}
	h.lockedBy, h.lockedUntil = caller, time.Now().Add(2*time.Minute)
	return true
}

// HostState is what the status file says of a host.
type HostState struct {
	Configured bool   `json:"configured"`
	Configures int32  `json:"configures"`
	Restarted  bool   `json:"restarted"`
	ServerJWT  bool   `json:"server_jwt"`
	Provision  string `json:"provision"` // the written plugin.choria.server.provision
}

// Status is the simulator's status file.
type Status struct {
	Hosts   map[string]HostState `json:"hosts"`
	Replies int64                `json:"replies"`
}

// WriteStatus writes the fleet's state to file (atomically), for the process that drives it.
func (f *Fleet) WriteStatus(file string) error {
	st := Status{Hosts: map[string]HostState{}, Replies: f.Replies.Load()}
	for _, h := range f.order {
		h.mu.Lock()
		st.Hosts[h.Identity] = HostState{Configured: h.Configured.Load(), Configures: h.Configures.Load(), Restarted: h.Restarted.Load(), ServerJWT: h.ServerJWT != "", Provision: h.Config["plugin.choria.server.provision"]}
		h.mu.Unlock()
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
