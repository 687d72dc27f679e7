// Package fleetsim simulates many Choria Servers in provisioning mode in one process: it answers
// the choria_provision, rpcutil and discovery agents on the wire as go-choria 0.30.2 servers do,
// with go-choria's own protocol packages (v2 for an Organization Issuer site, v1 for a pki site),
// for thousands of identities over one NATS connection (the broker lets a provisioning connection
// subscribe provisioning.node.>). Each simulated host has its own identity, keys and lock,
// publishes the lifecycle events a real server publishes, and after configure and restart leaves
// the provisioning collective as a real server does.
//
// Memory and CPU: a host is a small struct until it is asked something; keys are made only by the
// RPC that returns them (gen25519, gencsr, jwt's ECDH pair); one subscription serves every host;
// timers, not goroutines, wait out restart splays; the status file is written only when a host
// changed.
package fleetsim

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/lifecycle"
	"github.com/choria-io/go-choria/protocol"
	cs "github.com/choria-io/go-choria/providers/security/choria"
	"github.com/choria-io/go-choria/providers/security/filesec"
	"github.com/choria-io/tokens"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// Transient failure modes of flaky hosts.
const (
	FlakyDrop  = "drop"  // the request is not answered (a host busy, a message lost)
	FlakyError = "error" // answered with an aborted status and FlakyMessage
)

// FlakyMessage is the status message of a flaky host's error reply.
const FlakyMessage = "Simulated transient failure"

// Options describe a simulated fleet.
type Options struct {
	BrokerURL       string
	ProvisioningJWT string // file: the fleet's provisioning JWT (connection credentials and jwt reply)
	Token           string // provisioning token the servers expect ("" for none)
	Prefix          string
	Count           int
	Version         string        // reported by rpcutil#inventory and lifecycle events
	Latency         time.Duration // added before every reply
	// Share of hosts (0..1) that never answer: vanished hosts.
	Silent float64
	// Share of hosts whose first RPC of each locked kind (jwt, gen25519, gencsr, configure) is
	// answered with the provisioning lock error.
	LockErrors float64
	// Share of hosts (0..1) whose RPCs fail transiently: the first FlakyRequests RPCs (discovery
	// pings excluded) and every RPC within FlakyFor of the host's first RPC fail, as FlakyMode
	// says; then the host behaves.
	Flaky         float64
	FlakyRequests int
	FlakyFor      time.Duration
	FlakyMode     string // FlakyDrop (default) or FlakyError
	// KeyPool > 0 shares that many RSA keys among all hosts' gencsr replies (each CSR is still
	// made and signed per host, for its own name); 0 makes a fresh 2048-bit key per gencsr as a
	// real server does (~0.1 s of CPU each).
	KeyPool int
	// ScratchDir holds release_update's downloads (default: the system temporary directory).
	ScratchDir string
	// NoRestartSplay restarts at once instead of after the server's 2-11 s splay (benchmarks).
	NoRestartSplay bool
	// GoChoriaWire reads and writes protocol v2 messages with go-choria's constructors, which
	// compile the protocol's JSON schemas again for every message as a go-choria 0.30.2 server
	// does (wire.go): ~5x the simulator's CPU per host. The bench's simulator did this until
	// issue #11's last round; its table was measured so.
	GoChoriaWire bool
	// ReplyDelay holds the reply of each choria_provision action named here this long after the
	// action took effect (a configure written, a restart scheduled): the window in which a
	// provisioner that dies has made the change without learning it (fault tests).
	ReplyDelay map[string]time.Duration
	// Renewable hosts answer choria_provision#reprovision once provisioned, as a provisioned
	// server reached on its fleet collective does (renew.go); otherwise a provisioned host
	// answers nothing, as one renewal cannot reach.
	Renewable bool
}

// Host is one simulated server.
type Host struct {
	Identity string
	mu       sync.Mutex
	silent   bool
	lockFail map[string]bool
	// transient failures
	flaky      bool
	flakyLeft  int
	flakyUntil time.Time
	// the provisioning agent's state (per process on a real server)
	lockedBy    string
	lockedUntil time.Time
	ecdhPri     []byte
	version     string            // after a release_update
	restarting  bool              // a restart is scheduled: a real server answers none twice
	Config      map[string]string // what configure wrote
	ServerJWT   string
	CertCN      string      // pki: the common name of the certificate configure wrote
	KeyReceived bool        // pki: configure sent a private key, decrypted with the ECDH secret
	Restarted   atomic.Bool // restarted out of provisioning mode (or shut down): answers nothing more
	Configured  atomic.Bool
	Configures  atomic.Int32 // configure calls that wrote a configuration
	Credentials atomic.Int32 // configure calls that wrote credentials other than the last ones
	lastCreds   string       // the server JWT and certificate configure last wrote
	Updates     atomic.Int32 // release_update calls that replaced the (scratch) binary
	// Reprovisions counts the times a renewable host went back into provisioning mode
	Reprovisions   atomic.Int32
	reprovisioning bool        // a reprovision restart is scheduled
	arrived        atomic.Bool // announced itself: before that it is not on the network
	// when the host announced itself, was first configured and restarted (benchmark latencies)
	announcedAt, configuredAt, restartedAt time.Time
}

// Fleet is a running simulation.
type Fleet struct {
	opts        Options
	nc          *nats.Conn
	security    inter.SecurityProvider // protocol v2 (ed25519 JWT)
	securityV1  inter.SecurityProvider // protocol v1 (x509)
	jwt         []byte
	allowUpdate bool // the provisioning JWT allows release_update
	hosts       map[string]*Host
	order       []*Host
	keys        *keyPool
	Replies     atomic.Int64
	changes     atomic.Int64 // bumped on every state change the status file shows
	written     int64        // changes at the last status write
	wroteOnce   bool
}

// Start connects to the broker and serves opts.Count hosts; startup events are published for
// each (all at once when rate is 0, else rate per second) until ctx ends.
func Start(ctx context.Context, o Options, rate float64) (*Fleet, error) {
	f, err := newFleet(o)
	if err != nil {
		return nil, err
	}
	f.nc, err = nats.Connect(o.BrokerURL, nats.Token(strings.TrimSpace(string(f.jwt))), nats.Secure(&tls.Config{InsecureSkipVerify: true}), //nolint:gosec // provisioning connects unverified, as go-choria does
		nats.Name("fleetsim"), nats.MaxReconnects(-1), nats.CustomInboxPrefix("provisioning.reply.fleetsim"))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", o.BrokerURL, err)
	}
	for _, subj := range []string{"provisioning.node.>", "provisioning.broadcast.agent.choria_provision", "provisioning.broadcast.agent.discovery", "provisioning.broadcast.agent.rpcutil", "provisioning.broadcast.agent.choria_util"} {
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

// newFleet makes the hosts and security providers, without a connection.
func newFleet(o Options) (*Fleet, error) {
	jwt, err := os.ReadFile(o.ProvisioningJWT)
	if err != nil {
		return nil, err
	}
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	sec, err := cs.New(cs.WithConfig(&cs.Config{TokenFile: o.ProvisioningJWT, DisableTLSVerify: true}), cs.WithLog(logrus.NewEntry(log)))
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	secV1, err := filesec.New(filesec.WithConfig(&filesec.Config{Identity: "fleetsim", DisableTLSVerify: true}), filesec.WithLog(logrus.NewEntry(log)))
	if err != nil {
		return nil, fmt.Errorf("security (v1): %w", err)
	}
	f := &Fleet{opts: o, security: sec, securityV1: secV1, jwt: jwt, hosts: map[string]*Host{}, keys: newKeyPool(o.KeyPool)}
	if claims, err := tokens.ParseProvisionTokenUnverified(strings.TrimSpace(string(jwt))); err == nil {
		f.allowUpdate = claims.AllowUpdate
	}
	if f.opts.Version == "" {
		f.opts.Version = "0.30.2"
	}
	if f.opts.FlakyMode == "" {
		f.opts.FlakyMode = FlakyDrop
	}
	if f.opts.FlakyMode != FlakyDrop && f.opts.FlakyMode != FlakyError {
		return nil, fmt.Errorf("flaky mode %q: want %s or %s", f.opts.FlakyMode, FlakyDrop, FlakyError)
	}
	if f.opts.Flaky > 0 && f.opts.FlakyRequests <= 0 && f.opts.FlakyFor <= 0 {
		f.opts.FlakyRequests = 1
	}
	for i := 0; i < o.Count; i++ {
		h := &Host{Identity: fmt.Sprintf("%ssim-%05d.example", o.Prefix, i)}
		// deterministic shares: every k-th host, so a run is repeatable
		if every(i, o.Silent) {
			h.silent = true
		}
		if every(i, o.LockErrors) {
			h.lockFail = map[string]bool{"jwt": true, "gen25519": true, "gencsr": true, "configure": true}
		}
		// offset by one so that a flaky host is not also the silent or lock-error one
		if every(i+1, o.Flaky) {
			h.flaky, h.flakyLeft = true, f.opts.FlakyRequests
		}
		f.hosts[h.Identity] = h
		f.order = append(f.order, h)
	}
	return f, nil
}

func every(i int, share float64) bool {
	return share > 0 && math.Mod(float64(i), math.Max(1, math.Round(1/share))) == 0
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
		h.mu.Lock()
		h.announcedAt = time.Now()
		h.mu.Unlock()
		h.arrived.Store(true)
		f.event(h, lifecycle.Startup, provisionComponent)
	}
}

// Lifecycle components a go-choria server names itself with.
const (
	provisionComponent = "provision_mode_server"
	serverComponent    = "server"
)

// event publishes a lifecycle event of h as its server would (from the provisioning connection;
// the broker lets provisioning-mode servers publish choria.lifecycle.>).
func (f *Fleet) event(h *Host, t lifecycle.Type, component string, opts ...lifecycle.Option) {
	if f.nc == nil {
		return
	}
	h.mu.Lock()
	version := h.versionLocked(f)
	h.mu.Unlock()
	opts = append(opts, lifecycle.Identity(h.Identity), lifecycle.Component(component), lifecycle.Version(version))
	ev, err := lifecycle.New(t, opts...)
	if err == nil {
		ev.SetFormat(lifecycle.CloudEventV1Format) // go-choria servers' default format
		_ = lifecycle.PublishEvent(ev, rawConn{f.nc})
	}
}

type rawConn struct{ nc *nats.Conn }

func (r rawConn) PublishRaw(target string, data []byte) error { return r.nc.Publish(target, data) }
func (r rawConn) PublishRawMsg(msg *nats.Msg) error           { return r.nc.PublishMsg(msg) }
func (r rawConn) RequestRawMsgWithContext(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	return r.nc.RequestMsgWithContext(ctx, msg)
}

// wire is the protocol version of one request: v1 (x509 sites) or v2 (Organization Issuer).
type wire struct {
	v1  bool
	sec inter.SecurityProvider
}

func (f *Fleet) decode(data []byte) (protocol.Request, string, wire, error) {
	var head struct {
		Protocol string `json:"protocol"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, "", wire{}, err
	}
	if head.Protocol == string(protocol.TransportV1) {
		w := wire{v1: true, sec: f.securityV1}
		req, replyTo, err := decodeGoChoria(goChoriaV1(), data, w.sec)
		return req, replyTo, w, err
	}
	w := wire{sec: f.security}
	if f.opts.GoChoriaWire {
		req, replyTo, err := decodeGoChoria(goChoriaV2(), data, w.sec)
		return req, replyTo, w, err
	}
	req, replyTo, err := decodeV2(data)
	return req, replyTo, w, err
}

func (f *Fleet) handle(m *nats.Msg) {
	req, replyTo, w, err := f.decode(m.Data)
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
		// a host that has not arrived yet (--rate) is not connected: it answers nothing
		if h.silent || (h.Restarted.Load() && !f.opts.Renewable) || !h.arrived.Load() {
			continue
		}
		go f.reply(h, req, replyTo, w)
	}
}

func (f *Fleet) reply(h *Host, req protocol.Request, replyTo string, w wire) {
	if f.opts.Latency > 0 {
		time.Sleep(f.opts.Latency)
	}
	body, ok := h.answer(f, req)
	if !ok {
		return
	}
	if d := f.replyDelay(req); d > 0 {
		time.Sleep(d)
	}
	j, err := f.encode(h, req, body, w)
	if err != nil {
		return
	}
	if f.nc.Publish(replyTo, j) == nil {
		f.Replies.Add(1)
	}
}

func (f *Fleet) encode(h *Host, req protocol.Request, body []byte, w wire) ([]byte, error) {
	switch {
	case w.v1:
		return encodeGoChoria(goChoriaV1(), req, h.Identity, body, w.sec)
	case f.opts.GoChoriaWire:
		return encodeGoChoria(goChoriaV2(), req, h.Identity, body, w.sec)
	}
	return encodeV2(req, h.Identity, body, w.sec)
}

// replyDelay is how long the reply to req is held (Options.ReplyDelay).
func (f *Fleet) replyDelay(req protocol.Request) time.Duration {
	if len(f.opts.ReplyDelay) == 0 || req.Agent() != "choria_provision" {
		return 0
	}
	var rpc struct {
		Action string `json:"action"`
	}
	if json.Unmarshal(req.Message(), &rpc) != nil {
		return 0
	}
	return f.opts.ReplyDelay[rpc.Action]
}

// transientFailure says whether this RPC of a flaky host fails; called with h.mu held.
func (h *Host) transientFailureLocked(f *Fleet) bool {
	if !h.flaky {
		return false
	}
	now := time.Now()
	if f.opts.FlakyFor > 0 && h.flakyUntil.IsZero() {
		h.flakyUntil = now.Add(f.opts.FlakyFor)
	}
	fail := false
	if h.flakyLeft > 0 {
		h.flakyLeft--
		fail = true
	}
	if now.Before(h.flakyUntil) {
		fail = true
	}
	return fail
}

// HostState is what the status file says of a host.
type HostState struct {
	Configured bool  `json:"configured"`
	Configures int32 `json:"configures"`
	// Credentials counts the configure calls that wrote credentials (server JWT, certificate)
	// other than the ones written before: 1 for a host provisioned once, or configured again by
	// a retry of the same step; 2 or more for one configured twice with different credentials.
	Credentials int32 `json:"credentials"`
	Restarted   bool  `json:"restarted"`
	// Restarting: a restart was accepted and the host has not left provisioning mode yet
	Restarting  bool   `json:"restarting,omitempty"`
	ServerJWT   bool   `json:"server_jwt"`
	Provision   string `json:"provision"` // the written plugin.choria.server.provision
	CertCN      string `json:"cert_cn,omitempty"`
	KeyReceived bool   `json:"key_received,omitempty"`
	Version     string `json:"version,omitempty"` // after a release_update
	Updates     int32  `json:"updates,omitempty"`
	// Reprovisions: times a renewable host went back into provisioning mode
	Reprovisions int32 `json:"reprovisions,omitempty"`
	// AnnouncedAt is when the host published its first startup event (its sighting); ConfiguredAt
	// and RestartedAt when it was first configured and restarted out of provisioning mode.
	AnnouncedAt  time.Time `json:"announced_at,omitzero"`
	ConfiguredAt time.Time `json:"configured_at,omitzero"`
	RestartedAt  time.Time `json:"restarted_at,omitzero"`
	// Flaky hosts fail their RPCs until HealthyAt (when FlakyFor is set; zero until the first RPC).
	Flaky     bool      `json:"flaky,omitempty"`
	HealthyAt time.Time `json:"healthy_at,omitzero"`
}

// Status is the simulator's status file.
type Status struct {
	Hosts   map[string]HostState `json:"hosts"`
	Replies int64                `json:"replies"`
}

func (f *Fleet) changed() { f.changes.Add(1) }

// WriteStatus writes the fleet's state to file (atomically), for the process that drives it.
func (f *Fleet) WriteStatus(file string) error {
	st := Status{Hosts: map[string]HostState{}, Replies: f.Replies.Load()}
	for _, h := range f.order {
		h.mu.Lock()
		st.Hosts[h.Identity] = HostState{Configured: h.Configured.Load(), Configures: h.Configures.Load(), Credentials: h.Credentials.Load(), Restarted: h.Restarted.Load(), Restarting: h.restarting && !h.Restarted.Load(),
			ServerJWT: h.ServerJWT != "", Provision: h.Config["plugin.choria.server.provision"], CertCN: h.CertCN, KeyReceived: h.KeyReceived,
			Version: h.version, Updates: h.Updates.Load(), Reprovisions: h.Reprovisions.Load(), AnnouncedAt: h.announcedAt, ConfiguredAt: h.configuredAt, RestartedAt: h.restartedAt,
			Flaky: h.flaky, HealthyAt: h.flakyUntil}
		h.mu.Unlock()
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(st); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// WriteStatusIfChanged writes the status file when a host changed since the last write (or the
// file is new): an idle fleet of thousands costs nothing.
func (f *Fleet) WriteStatusIfChanged(file string) error {
	c := f.changes.Load()
	if f.wroteOnce && c == f.written {
		return nil
	}
	if err := f.WriteStatus(file); err != nil {
		return err
	}
	f.written, f.wroteOnce = c, true
	return nil
}
