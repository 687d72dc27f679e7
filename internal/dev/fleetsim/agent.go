package fleetsim

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/choria-io/go-choria/choria"
	"github.com/choria-io/go-choria/config"
	"github.com/choria-io/go-choria/lifecycle"
	"github.com/choria-io/go-choria/protocol"
	"github.com/choria-io/go-choria/providers/agent/mcorpc"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/golang/provision"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/golang/rpcutil"
	"github.com/choria-io/go-choria/server/agents"
	"github.com/choria-io/go-updater"
)

// Where a go-choria server with default paths keeps its configuration: each simulated host is its
// own machine, so every one answers with the same paths.
const (
	configFile = "/etc/choria/server.conf"
	configDir  = "/etc/choria"
	sslDir     = "/etc/choria/ssl"
)

// The agents a go-choria 0.30.2 server in provisioning mode reports (rpcutil#inventory and
// agent_inventory), with the metadata its agents declare. The versions are the build's.
var simAgents = []struct {
	name string
	meta agents.Metadata
}{
	{"choria_provision", agents.Metadata{License: "Apache-2.0", Author: "R.I.Pienaar <rip@devco.net>", Timeout: 20, Name: "choria_provision", URL: "https://choria.io", Description: "Choria Provisioner"}},
	{"choria_util", agents.Metadata{License: "Apache-2.0", Author: "R.I.Pienaar <rip@devco.net>", Timeout: 10, Name: "choria_util", URL: "https://choria.io", Description: "Choria Utilities"}},
	{"discovery", agents.Metadata{License: "Apache-2.0", Author: "R.I.Pienaar <rip@devco.net>", Timeout: 2, Name: "discovery", URL: "http://choria.io", Description: "Discovery Agent"}},
	{"rpcutil", agents.Metadata{License: "Apache-2.0", Author: "R.I.Pienaar <rip@devco.net>", Timeout: 2, Name: "rpcutil", URL: "http://choria.io", Description: "Choria RPC Utilities"}},
}

func served(agent string) bool {
	for _, a := range simAgents {
		if a.name == agent {
			return true
		}
	}
	return false
}

// versionLocked is the version the host's (simulated) binary reports.
func (h *Host) versionLocked(f *Fleet) string {
	if h.version != "" {
		return h.version
	}
	return f.opts.Version
}

// answer returns the reply body a go-choria server would send; ok false for no reply.
func (h *Host) answer(f *Fleet, req protocol.Request) ([]byte, bool) {
	if h.Restarted.Load() && req.Agent() != "choria_provision" {
		return nil, false // a renewable host out of provisioning mode: reprovision only
	}
	if req.Agent() == "discovery" {
		// a discovery ping answers with "pong" when the filter's agents are ones we serve
		if filter, ok := req.Filter(); ok && filter != nil {
			for _, a := range filter.AgentFilters() {
				if !served(a) {
					return nil, false
				}
			}
		}
		return []byte("pong"), true
	}
	if !served(req.Agent()) {
		return nil, false
	}
	rpc := &mcorpc.Request{}
	if err := json.Unmarshal(req.Message(), rpc); err != nil {
		return marshal(&mcorpc.Reply{Statuscode: mcorpc.InvalidData, Data: json.RawMessage(`{}`),
			Statusmsg: fmt.Sprintf("Could not process request: could not parse incoming message as a MCollective SimpleRPC Request: %s", err)})
	}
	rpc.Agent, rpc.RequestID, rpc.CallerID, rpc.SenderID = req.Agent(), req.RequestID(), req.CallerID(), req.SenderID()
	// as mcorpc.Agent: the reply starts OK with empty data, actions fill it or abort
	reply := &mcorpc.Reply{Action: rpc.Action, Statuscode: mcorpc.OK, Statusmsg: "OK", Data: json.RawMessage(`{}`)}
	if h.Restarted.Load() {
		return h.answerProvisioned(f, req, rpc, reply)
	}

	h.mu.Lock()
	if h.transientFailureLocked(f) {
		h.mu.Unlock()
		if f.opts.FlakyMode == FlakyDrop {
			return nil, false
		}
		abort(FlakyMessage, reply)
		return marshal(reply)
	}
	if h.restarting && req.Agent() == "choria_provision" {
		// go-choria's restart holds the agent's lock through its splay: the action never runs
		h.mu.Unlock()
		return nil, false
	}
	var after func()
	switch req.Agent() {
	case "rpcutil":
		h.rpcutil(f, rpc, reply)
	case "choria_provision":
		after = h.provision(f, rpc, reply)
	default:
		reply.Statuscode, reply.Statusmsg = mcorpc.UnknownAction, fmt.Sprintf("Unknown action %s for agent %s", rpc.Action, req.Agent())
	}
	h.mu.Unlock()
	if after != nil {
		after()
	}
	return marshal(reply)
}

func marshal(reply *mcorpc.Reply) ([]byte, bool) {
	b, err := json.Marshal(reply)
	return b, err == nil
}

func abort(msg string, reply *mcorpc.Reply) {
	reply.Statuscode, reply.Statusmsg = mcorpc.Aborted, msg
}

func unknown(rpc *mcorpc.Request, reply *mcorpc.Reply) {
	reply.Statuscode, reply.Statusmsg = mcorpc.UnknownAction, fmt.Sprintf("Unknown action %s for agent %s", rpc.Action, rpc.Agent)
}

func (h *Host) rpcutil(f *Fleet, rpc *mcorpc.Request, reply *mcorpc.Reply) {
	switch rpc.Action {
	case "inventory":
		names := make([]string, len(simAgents))
		for i, a := range simAgents {
			names[i] = a.name
		}
		reply.Data = &rpcutil.InventoryReply{
			Agents: names, Classes: []string{}, Collectives: []string{"provisioning"}, DataPlugins: []string{},
			Facts: json.RawMessage(`{}`), Machines: []rpcutil.MachineState{}, MainCollective: "provisioning",
			Version: h.versionLocked(f), Upgradable: f.allowUpdate,
		}
	case "agent_inventory":
		o := &rpcutil.AgentInventoryReply{}
		for _, a := range simAgents {
			md := a.meta
			md.Version = h.versionLocked(f)
			o.Agents = append(o.Agents, rpcutil.AgentInventoryInfoReply{Agent: a.name, Metadata: md})
		}
		reply.Data = o
	case "ping":
		reply.Data = rpcutil.PingReply{Pong: time.Now().Unix()}
	case "collective_info":
		reply.Data = rpcutil.CollectiveInfoReply{MainCollective: "provisioning", Collectives: []string{"provisioning"}}
	default:
		unknown(rpc, reply)
	}
}

// provision answers choria_provision as go-choria 0.30.2's agent does, in its order of checks:
// the lock (for locked actions), provisioning mode, request parsing, then the token. It returns
// what to do once the reply is made (events, scheduled restarts), run without h.mu.
func (h *Host) provision(f *Fleet, rpc *mcorpc.Request, reply *mcorpc.Reply) func() {
	switch rpc.Action {
	case "jwt", "gen25519", "gencsr", "configure", "release_update":
		if !h.lockLocked(rpc.SenderID, rpc.CallerID, rpc.Action) {
			abort(provision.LockedError, reply)
			return nil
		}
	}
	token := func(t string) bool {
		if f.opts.Token != "" && t != f.opts.Token {
			abort("Incorrect provision token supplied", reply)
			return false
		}
		return true
	}
	// answer makes the reply of an action whose arguments parsed and whose token matched
	answer := func(data any, err error) {
		if err != nil {
			abort(err.Error(), reply)
			return
		}
		reply.Data = data
	}
	switch rpc.Action {
	case "jwt":
		if args := (&provision.JWTRequest{}); mcorpc.ParseRequestData(args, rpc, reply) && token(args.Token) {
			answer(h.jwt(f))
		}

	case "gen25519":
		if args := (&provision.ED25519Request{}); mcorpc.ParseRequestData(args, rpc, reply) && token(args.Token) {
			answer(h.gen25519(args.Nonce))
		}

	case "gencsr":
		if args := (&provision.CSRRequest{}); mcorpc.ParseRequestData(args, rpc, reply) && token(args.Token) {
			answer(h.csr(f, args))
		}

	case "configure":
		return h.configure(f, rpc, reply, token)

	case "release_update":
		if !f.allowUpdate {
			abort("Version updates is not enabled in the configuration", reply)
			return nil
		}
		args := &provision.ReleaseUpdateRequest{}
		if !mcorpc.ParseRequestData(args, rpc, reply) || !token(args.Token) {
			return nil
		}
		if err := f.update(h, args); err != nil {
			abort(err.Error(), reply)
			return nil
		}
		h.version = args.Version
		h.Updates.Add(1)
		f.changed()
		reply.Data = provision.Reply{Message: "Restarting Choria Server after 2s"}
		return func() {
			f.event(h, lifecycle.Upgraded, provisionComponent, lifecycle.NewVersion(args.Version))
			f.restart(h, 2*time.Second, false)
		}

	case "restart":
		args := &provision.RestartRequest{}
		if !mcorpc.ParseRequestData(args, rpc, reply) || !token(args.Token) {
			return nil
		}
		if h.Config == nil {
			// a host in provisioning mode has no configuration file yet
			abort(fmt.Sprintf("Configuration %s could not be parsed, restart cannot continue: %s", configFile, missingConfig()), reply)
			return nil
		}
		if enabled(h.Config["plugin.choria.server.provision"]) {
			abort(fmt.Sprintf("Configuration %s enables provisioning, restart cannot continue", configFile), reply)
			return nil
		}
		if args.Splay == 0 {
			args.Splay = 10
		}
		splay := time.Duration(mrand.N(args.Splay)+2) * time.Second
		reply.Data = provision.Reply{Message: fmt.Sprintf("Restarting Choria Server after %v", splay)}
		return func() { f.restart(h, splay, true) }

	case "shutdown":
		args := &provision.ShutdownRequest{}
		if !mcorpc.ParseRequestData(args, rpc, reply) || !token(args.Token) {
			return nil
		}
		splay := time.Duration(mrand.IntN(10)) * time.Second
		reply.Data = provision.Reply{Message: fmt.Sprintf("Shutting Choria Server down after %v", splay)}
		return func() { f.shutdown(h, splay) }

	case "reprovision":
		// only a provisioned server can go back to provisioning mode; a simulated host answers
		// only while in provisioning mode (it has no connection to the fleet's collective)
		abort("Server is already in provisioning mode, cannot enable provisioning mode again", reply)

	default:
		unknown(rpc, reply)
	}
	return nil
}

// enabled parses a boolean configuration value as go-choria does.
func enabled(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "y", "yes", "true", "t", "on":
		return true
	}
	return false
}

var (
	missingOnce sync.Once
	missingErr  error
)

// missingConfig is go-choria's error for parsing a configuration file that does not exist.
func missingConfig() error {
	missingOnce.Do(func() {
		_, missingErr = config.NewConfig(filepath.Join(os.TempDir(), "fleetsim-no-such-dir", "server.conf"))
	})
	if missingErr == nil {
		return errors.New("no configuration file")
	}
	return errors.New(strings.ReplaceAll(missingErr.Error(), filepath.Join(os.TempDir(), "fleetsim-no-such-dir", "server.conf"), configFile))
}

func (h *Host) configure(f *Fleet, rpc *mcorpc.Request, reply *mcorpc.Reply, token func(string) bool) func() {
	args := &provision.ConfigureRequest{}
	if !mcorpc.ParseRequestData(args, rpc, reply) || !token(args.Token) {
		return nil
	}
	if len(args.Configuration) == 0 {
		abort("Did not receive any configuration to write, cannot write a empty configuration file", reply)
		return nil
	}
	if len(args.Key) != 0 && len(args.ECDHPublic) == 0 {
		abort("EDCH Public Key not supplied while providing a private key", reply)
		return nil
	}
	settings := map[string]string{}
	if err := json.Unmarshal([]byte(args.Configuration), &settings); err != nil {
		abort(fmt.Sprintf("Could not decode configuration data: %s", err), reply)
		return nil
	}
	certCN, keyOK := "", false
	if args.Certificate != "" && args.SSLDir != "" && args.CA != "" {
		if block, _ := pem.Decode([]byte(args.Certificate)); block != nil {
			if c, err := x509.ParseCertificate(block.Bytes); err == nil {
				certCN = c.Subject.CommonName
			}
		}
		if args.Key != "" {
			if _, err := h.decryptKeyLocked(args.Key, args.ECDHPublic); err != nil {
				abort(fmt.Sprintf("TLS Setup Failed: could not decrypt private key: %s", err), reply)
				return nil
			}
			keyOK = true
		}
	}
	for _, p := range []struct {
		set      map[string]string
		ext, msg string
	}{{args.ActionPolicies, ".policy", "Could not save Action Policies"}, {args.OPAPolicies, ".rego", "Could not save Open Policy Agent Policies"}} {
		for k := range p.set {
			if !strings.HasSuffix(k, p.ext) {
				abort(fmt.Sprintf("%s: expected %q to have %s extension", p.msg, k, p.ext), reply)
				return nil
			}
		}
	}
	h.Config = settings
	if creds := args.ServerJWT + "\x00" + args.Certificate; creds != h.lastCreds {
		h.lastCreds = creds
		h.Credentials.Add(1)
	}
	if args.ServerJWT != "" {
		h.ServerJWT = args.ServerJWT
	}
	if certCN != "" {
		h.CertCN = certCN
	}
	h.KeyReceived = h.KeyReceived || keyOK
	h.Configured.Store(true)
	h.Configures.Add(1)
	if h.configuredAt.IsZero() {
		h.configuredAt = time.Now()
	}
	f.changed()
	reply.Data = provision.Reply{Message: fmt.Sprintf("Wrote %d lines to %s", len(settings)+1, configFile)}
	return func() { f.event(h, lifecycle.Provisioned, provisionComponent) }
}

// decryptKeyLocked is go-choria's decryptPrivateKey with the host's ECDH secret.
func (h *Host) decryptKeyLocked(key, provisionerPub string) ([]byte, error) {
	pb, err := hex.DecodeString(provisionerPub)
	if err != nil {
		return nil, err
	}
	if len(h.ecdhPri) == 0 {
		return nil, errors.New("private key not set")
	}
	secret, err := choria.ECDHSharedSecret(h.ecdhPri, pb)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode([]byte(key))
	if block == nil {
		return nil, errors.New("bad key received")
	}
	//lint:ignore SA1019 go-choria's format
	if !x509.IsEncryptedPEMBlock(block) { //nolint:staticcheck // go-choria's format
		return nil, errors.New("key is not encrypted")
	}
	return x509.DecryptPEMBlock(block, secret) //nolint:staticcheck // go-choria's format
}

// csr makes a key and a CSR as go-choria's gencsr does: CN from the request or the identity,
// C, L, O and OU when given (go-choria ignores ST), SHA256WithRSA.
// jwt answers choria_provision#jwt: the provisioning JWT and a new ECDH public key.
func (h *Host) jwt(f *Fleet) (*provision.JWTReply, error) {
	pri, pub, err := choria.ECDHKeyPair()
	if err != nil {
		return nil, fmt.Errorf("Could not calculate EDCH keys: %s", err)
	}
	h.ecdhPri = pri
	return &provision.JWTReply{JWT: string(f.jwt), ECDHPublic: fmt.Sprintf("%x", pub)}, nil
}

// gen25519 answers choria_provision#gen25519: a new key pair's public key and its signature of
// the nonce. The seed is not kept: a simulated host never connects with it.
func (h *Host) gen25519(nonce string) (*provision.ED25519Reply, error) {
	pub, pri, err := choria.Ed25519KeyPair()
	if err != nil {
		return nil, fmt.Errorf("Could not create keypair: %s", err)
	}
	sig, err := choria.Ed25519Sign(pri, []byte(nonce))
	if err != nil {
		return nil, fmt.Errorf("Could not sign the nonce: %s", err)
	}
	return &provision.ED25519Reply{PublicKey: hex.EncodeToString(pub), Signature: hex.EncodeToString(sig), Directory: configDir}, nil
}

func (h *Host) csr(f *Fleet, args *provision.CSRRequest) (*provision.CSRReply, error) {
	if args.CN == "" {
		args.CN = h.Identity
	}
	subj := pkix.Name{CommonName: args.CN}
	if args.C != "" {
		subj.Country = []string{args.C}
	}
	if args.L != "" {
		subj.Locality = []string{args.L}
	}
	if args.O != "" {
		subj.Organization = []string{args.O}
	}
	if args.OU != "" {
		subj.OrganizationalUnit = []string{args.OU}
	}
	asn1Subj, err := asn1.Marshal(subj.ToRDNSequence())
	if err != nil {
		return nil, fmt.Errorf("Could not create CSR: %s", err) //nolint:staticcheck // go-choria's message
	}
	key, err := f.keys.get()
	if err != nil {
		return nil, fmt.Errorf("Could not create private key: %s", err) //nolint:staticcheck // go-choria's message
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{RawSubject: asn1Subj, SignatureAlgorithm: x509.SHA256WithRSA}, key)
	if err != nil {
		return nil, fmt.Errorf("Could not create CSR bytes: %s", err) //nolint:staticcheck // go-choria's message
	}
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&key.PublicKey)})
	return &provision.CSRReply{CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), PublicKey: string(pub), SSLDir: sslDir}, nil
}

// keyPool makes RSA keys for gencsr: a fresh one each time (size 0), or round robin over size
// keys made on first use.
type keyPool struct {
	mu   sync.Mutex
	size int
	keys []*rsa.PrivateKey
	next int
}

func newKeyPool(size int) *keyPool { return &keyPool{size: size} }

func (p *keyPool) get() (*rsa.PrivateKey, error) {
	if p.size <= 0 {
		return rsa.GenerateKey(rand.Reader, 2048)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) < p.size {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		p.keys = append(p.keys, k)
		return k, nil
	}
	k := p.keys[p.next%len(p.keys)]
	p.next++
	return k, nil
}

// lockLocked is the agent's provisioning lock: one sender.caller for two minutes, extended by
// each call; a lock-error host refuses the first call of each locked action once.
func (h *Host) lockLocked(sender, caller, action string) bool {
	if h.lockFail[action] {
		delete(h.lockFail, action)
		return false
	}
	who := sender + "." + caller
	now := time.Now()
	if h.lockedBy != "" && h.lockedBy != who && now.Before(h.lockedUntil) {
		return false
	}
	h.lockedBy, h.lockedUntil = who, now.Add(provision.LockWindow)
	return true
}

// update runs go-updater exactly as the server's release_update does, but against a scratch file
// of this host instead of the running binary: the release is fetched from the repository and its
// checksum verified, so failures carry go-choria's messages; the scratch file is removed after.
func (f *Fleet) update(h *Host, args *provision.ReleaseUpdateRequest) error {
	dir := f.opts.ScratchDir
	if dir == "" {
		dir = os.TempDir()
	}
	tmp, err := os.MkdirTemp(dir, "fleetsim-update-")
	if err == nil {
		defer os.RemoveAll(tmp)
		target := filepath.Join(tmp, "choria")
		err = os.WriteFile(target, []byte("simulated choria binary\n"), 0o755)
		if err == nil {
			err = updater.Apply(updater.Version(args.Version), updater.SourceRepo(args.Repository), updater.TargetFile(target), updater.Logger(discard{}))
		}
	}
	if err != nil {
		if rerr := updater.RollbackError(err); rerr != nil {
			return fmt.Errorf("Update to version %s failed, rollback also failed, server in broken state: %s", args.Version, rerr) //nolint:staticcheck // go-choria's message
		}
		return fmt.Errorf("Update to version %s failed, release rolled back: %s", args.Version, err) //nolint:staticcheck // go-choria's message
	}
	return nil
}

type discard struct{}

func (discard) Print(...any)          {}
func (discard) Printf(string, ...any) {}
func (discard) Println(...any)        {}
func (discard) Fatal(...any)          {}
func (discard) Fatalf(string, ...any) {}
func (discard) Fatalln(...any)        {}
func (discard) Panic(...any)          {}
func (discard) Panicf(string, ...any) {}
func (discard) Panicln(...any)        {}

// beginRestart marks the host as going away; false when it already is (a second restart or
// shutdown request while the first waits out its splay is a no-op, as in go-choria).
func (h *Host) beginRestart() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.restarting {
		return false
	}
	h.restarting = true
	return true
}

// restart is go-choria's restart: a shutdown event, the splay, then the process again. Into its
// written configuration (leaving provisioning mode, a startup event as a server) when configured
// is true, else (after release_update) back into provisioning mode with a new process's state.
func (f *Fleet) restart(h *Host, splay time.Duration, configured bool) {
	if !h.beginRestart() {
		return
	}
	f.changed()
	f.event(h, lifecycle.Shutdown, provisionComponent)
	if f.opts.NoRestartSplay {
		splay = 0
	}
	time.AfterFunc(splay, func() {
		if configured {
			h.mu.Lock()
			h.restartedAt = time.Now()
			h.mu.Unlock()
			h.Restarted.Store(true)
			f.changed()
			f.event(h, lifecycle.Startup, serverComponent)
			return
		}
		h.mu.Lock()
		h.restarting, h.lockedBy, h.lockedUntil, h.ecdhPri = false, "", time.Time{}, nil
		h.mu.Unlock()
		f.changed()
		f.event(h, lifecycle.Startup, provisionComponent)
	})
}

// shutdown is go-choria's restartViaExit: after the splay a shutdown event, then the process ends.
func (f *Fleet) shutdown(h *Host, splay time.Duration) {
	if !h.beginRestart() {
		return
	}
	if f.opts.NoRestartSplay {
		splay = 0
	}
	time.AfterFunc(splay, func() {
		f.event(h, lifecycle.Shutdown, provisionComponent)
		h.Restarted.Store(true)
		f.changed()
	})
}
