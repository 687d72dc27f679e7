package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choria-io/go-choria/choria"
	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/lifecycle"
	"github.com/choria-io/go-choria/protocol"
	rpc "github.com/choria-io/go-choria/providers/agent/mcorpc/client"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/dev/examplehelper"
	"github.com/choria-temporal/provisioner/internal/service"
)

// simReply is one host's reply to one request, as the wire carries it.
type simReply struct {
	Code int
	Msg  string
	Data map[string]any
	Raw  json.RawMessage
}

// call sends one request to one host from this process through go-choria's rpcclient and returns
// its reply (nil if none came within timeout).
func call(t *testing.T, fw inter.Framework, collective, identity, agent, action string, payload any, timeout time.Duration) *simReply {
	t.Helper()
	c, err := rpc.New(fw, agent)
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		out *simReply
	)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	_, err = c.Do(ctx, action, payload, rpc.Targets([]string{identity}), rpc.Collective(collective), rpc.Timeout(timeout),
		rpc.ReplyHandler(func(pr protocol.Reply, r *rpc.RPCReply) {
			mu.Lock()
			defer mu.Unlock()
			sr := &simReply{Code: int(r.Statuscode), Msg: r.Statusmsg, Raw: r.Data}
			_ = json.Unmarshal(r.Data, &sr.Data)
			out = sr
		}))
	require.NoError(t, err, "%s#%s to %s", agent, action, identity)
	mu.Lock()
	defer mu.Unlock()
	return out
}

// shape is a JSON value's structure: object keys with their shapes, an array's first element,
// a scalar's type.
func shape(v any) string {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ":" + shape(x[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		if len(x) == 0 {
			return "[]"
		}
		return "[" + shape(x[0]) + "]"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

var (
	absPath = regexp.MustCompile(`/[^\s:"]*`)
	number  = regexp.MustCompile(`[0-9]+`)
)

// normal is a status message with the parts that differ between any two hosts replaced: paths
// (each host has its own directory), numbers (random splays, versions).
func normal(msg string) string {
	return number.ReplaceAllString(absPath.ReplaceAllString(msg, "<path>"), "N")
}

// The simulator is faithful to go-choria 0.30.2: the same flow, called action by action from this
// process, against a real server (its own process) and a simulated host (the fleet-sim process)
// gets replies with the same status codes, the same error messages, and data of the same shape;
// and both end the same way: configured with the provisioner's configuration, out of the
// provisioning collective, announced by a startup event of a normal server.
func TestIntegrationFidelity(t *testing.T) {
	start := time.Now()
	e := newEnv(t, envOptions{servers: 1})
	real := e.stack.Fleet.Members[0].Identity
	status := e.startFleetSim(1, "--prefix", "fid-", "--scratch-dir", t.TempDir())
	sim := "fid-sim-00000.example"
	hosts := []string{real, sim}

	// the provisioner's caller, and another one (a second sender) to find the lock held
	fw, err := service.NewChoriaClientFramework(e.cfg, "")
	require.NoError(t, err)
	otherConf := filepath.Join(e.stack.Opts.Dir, "other-client.conf")
	b, err := os.ReadFile(e.stack.ClientConfig)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(otherConf, bytes.Replace(b, []byte("identity = provisioner_signer"), []byte("identity = other-provisioner"), 1), 0o600))
	otherCfg := *e.cfg
	otherCfg.ChoriaConfig = otherConf
	other, err := service.NewChoriaClientFramework(&otherCfg, "")
	require.NoError(t, err)
	adminCfg := *e.cfg
	adminCfg.ChoriaConfig, adminCfg.BrokerProvisioningPassword = e.stack.AdminConfig, ""
	admin, err := service.NewChoriaClientFramework(&adminCfg, "")
	require.NoError(t, err)

	// lifecycle events of both accounts, seen from the fleet's account as an administrator would
	events := watchEvents(t, admin)

	// both hosts up in provisioning mode
	require.Eventually(t, func() bool {
		for _, h := range hosts {
			if r := call(t, fw, "provisioning", h, "rpcutil", "ping", nil, 2*time.Second); r == nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 200*time.Millisecond, "both hosts answer ping in provisioning mode")

	tok := e.cfg.Token
	repo := httptest.NewServer(http.NotFoundHandler())
	defer repo.Close()
	type step struct {
		name    string
		fw      inter.Framework
		agent   string
		action  string
		payload map[string]any
	}
	steps := []step{
		{"jwt, wrong token", fw, "choria_provision", "jwt", map[string]any{"token": "wrong"}},
		{"jwt, lock held by another caller", other, "choria_provision", "jwt", map[string]any{"token": tok}},
		{"jwt", fw, "choria_provision", "jwt", map[string]any{"token": tok}},
		{"gen25519, wrong token", fw, "choria_provision", "gen25519", map[string]any{"token": "wrong", "nonce": "n"}},
		{"gen25519", fw, "choria_provision", "gen25519", map[string]any{"token": tok, "nonce": "a-nonce"}},
		{"gencsr", fw, "choria_provision", "gencsr", map[string]any{"token": tok, "O": "Choria", "OU": "fidelity", "C": "MT", "L": "Valletta"}},
		{"inventory", fw, "rpcutil", "inventory", nil},
		{"ping", fw, "rpcutil", "ping", nil},
		{"agent_inventory", fw, "rpcutil", "agent_inventory", nil},
		{"restart, not configured", fw, "choria_provision", "restart", map[string]any{"token": tok}},
		{"reprovision, in provisioning mode", fw, "choria_provision", "reprovision", map[string]any{"token": tok}},
		{"release_update, bad repository", fw, "choria_provision", "release_update", map[string]any{"token": tok, "repository": repo.URL, "version": "0.99.0"}},
		{"configure, wrong token", fw, "choria_provision", "configure", map[string]any{"token": "wrong", "config": `{"a":"b"}`}},
		{"configure, not JSON", fw, "choria_provision", "configure", map[string]any{"token": tok, "config": "not json"}},
		{"configure, key without ECDH public", fw, "choria_provision", "configure", map[string]any{"token": tok, "config": `{"a":"b"}`, "key": "k"}},
	}
	replies := map[string]map[string]*simReply{}
	for _, s := range steps {
		replies[s.name] = map[string]*simReply{}
		for _, h := range hosts {
			r := call(t, s.fw, "provisioning", h, s.agent, s.action, s.payload, 10*time.Second)
			require.NotNil(t, r, "%s: no reply from %s", s.name, h)
			replies[s.name][h] = r
		}
		compare(t, s.name, replies[s.name][real], replies[s.name][sim])
	}
	for _, name := range []string{"jwt, wrong token", "gen25519, wrong token", "configure, wrong token"} {
		require.Equal(t, "Incorrect provision token supplied", replies[name][sim].Msg)
	}
	require.Equal(t, "Could not obtain provisioning lock", replies["jwt, lock held by another caller"][sim].Msg)
	require.Contains(t, replies["release_update, bad repository"][sim].Msg, "Update to version 0.99.0 failed, release rolled back: release 0.99.0 not found")
	inv := map[string]map[string]any{real: replies["inventory"][real].Data, sim: replies["inventory"][sim].Data}
	for _, k := range []string{"agents", "collectives", "main_collective", "data_plugins", "classes", "machines", "upgradable", "facts"} {
		require.Equal(t, inv[real][k], inv[sim][k], "inventory %s", k)
	}
	agentsOf := func(h string) []any {
		out := []any{}
		for _, a := range replies["agent_inventory"][h].Data["agents"].([]any) {
			m := a.(map[string]any)
			delete(m, "version") // the build's version
			out = append(out, m)
		}
		return out
	}
	require.Equal(t, agentsOf(real), agentsOf(sim), "agent_inventory")

	// configure with what the provisioner would send (the example helper's configuration and a
	// server JWT signed as the provisioner signs it), then restart
	replies["configure"] = map[string]*simReply{}
	for _, h := range hosts {
		gen := replies["gen25519"][h].Data
		cfg, serverJWT := provisionerConfig(t, e, h, gen["public_key"].(string), gen["directory"].(string))
		r := call(t, fw, "provisioning", h, "choria_provision", "configure", map[string]any{"token": tok, "config": cfg, "server_jwt": serverJWT}, 10*time.Second)
		require.NotNil(t, r, h)
		replies["configure"][h] = r
		require.Equal(t, 0, r.Code, "%s: %s", h, r.Msg)
	}
	for _, name := range []string{"configure", "restart"} {
		if name == "restart" {
			replies[name] = map[string]*simReply{}
			for _, h := range hosts {
				replies[name][h] = call(t, fw, "provisioning", h, "choria_provision", "restart", map[string]any{"token": tok, "splay": 1}, 10*time.Second)
				require.NotNil(t, replies[name][h], h)
			}
		}
		compare(t, name, replies[name][real], replies[name][sim])
	}
	require.Regexp(t, `^Restarting Choria Server after [23]s$`, replies["restart"][sim].Data["message"])

	// the same end: out of the provisioning collective, a startup event as a normal server, the
	// provisioner's configuration in place
	m := e.stack.Fleet.Members[0]
	require.Eventually(t, func() bool { return runningProvisioned(m) }, 30*time.Second, 200*time.Millisecond, "the real server runs provisioned")
	require.Eventually(t, func() bool { h := status().Hosts[sim]; return h.Restarted }, 30*time.Second, 200*time.Millisecond, "the simulated host restarted")
	defer func() { events.mu.Lock(); t.Logf("lifecycle events seen: %v", events.seen); events.mu.Unlock() }()
	for _, h := range hosts {
		require.Eventually(t, func() bool { return events.seenEvent(h, "startup", "server") }, 20*time.Second, 200*time.Millisecond, "%s: startup event as a server", h)
		require.True(t, events.seenEvent(h, "provisioned", "provision_mode_server"), "%s: provisioned event", h)
		require.True(t, events.seenEvent(h, "shutdown", "provision_mode_server"), "%s: shutdown event before the restart", h)
		require.Nil(t, call(t, fw, "provisioning", h, "rpcutil", "ping", nil, 2*time.Second), "%s left the provisioning collective", h)
	}
	st := status().Hosts[sim]
	require.Equal(t, "false", st.Provision)
	require.True(t, st.ServerJWT)
	require.Equal(t, int32(1), st.Configures)
	require.True(t, devstack.Provisioned(m), "the real server's configuration turns provisioning off")

	// reprovision: the real server (now on the fleet's collective) goes back to provisioning mode;
	// a simulated host has no connection to the fleet's collective, so nothing answers there
	rr := call(t, admin, "choria", real, "choria_provision", "reprovision", map[string]any{"token": tok}, 10*time.Second)
	require.NotNil(t, rr)
	require.Equal(t, 0, rr.Code, rr.Msg)
	require.Regexp(t, `^Restarting after [0-9]+s$`, rr.Data["message"])
	require.Equal(t, "{message:string}", shape(rr.Data))
	require.Nil(t, call(t, admin, "choria", sim, "choria_provision", "reprovision", map[string]any{"token": tok}, time.Second))
	t.Logf("fidelity: %d request kinds compared on a real and a simulated host in %v", len(steps)+2, time.Since(start).Round(100*time.Millisecond))
}

// compare requires the same status code, the same normalised status message and the same data
// shape from the real and the simulated host.
func compare(t *testing.T, name string, real, sim *simReply) {
	t.Helper()
	t.Logf("%-36s real: %d %q %s", name, real.Code, real.Msg, shape(real.Data))
	require.Equal(t, real.Code, sim.Code, "%s: status code (sim: %q, real: %q)", name, sim.Msg, real.Msg)
	require.Equal(t, normal(real.Msg), normal(sim.Msg), "%s: status message", name)
	require.Equal(t, shape(real.Data), shape(sim.Data), "%s: data shape\nreal: %s\nsim:  %s", name, real.Raw, sim.Raw)
}

// provisionerConfig is what the provisioner sends a host in issuer mode: the example helper's
// configuration, JSON encoded, and a server JWT for the host's new key.
func provisionerConfig(t *testing.T, e *env, identity, pub, dir string) (string, string) {
	t.Helper()
	in, err := json.Marshal(map[string]any{"identity": identity, "ed25519_pubkey": map[string]string{"public_key": pub, "directory": dir}, "inventory": "{}"})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, examplehelper.Run(examplehelper.Options{BrokerURL: e.stack.Broker.URL, IssuerPublic: e.stack.Creds.IssuerPublic}, bytes.NewReader(in), &out))
	var reply struct {
		Configuration map[string]string `json:"configuration"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &reply))
	signer := &activities.ServerJWTSigner{SigningKey: e.cfg.JWTSigningKey, SigningToken: e.cfg.JWTSigningToken, DefaultValidity: e.cfg.ServerJWTValidityDuration}
	signed, err := signer.Sign(activities.SignInput{Identity: identity, PublicKey: pub, Config: reply.Configuration})
	require.NoError(t, err)
	cfg, err := json.Marshal(reply.Configuration)
	require.NoError(t, err)
	return string(cfg), signed.JWT
}

// eventLog records lifecycle events by identity.
type eventLog struct {
	mu   sync.Mutex
	seen map[string][]string // identity -> "type/component"
}

func (l *eventLog) saw(id, typ, component string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[id] = append(l.seen[id], typ+"/"+component)
}

func (l *eventLog) seenEvent(id, typ, component string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.seen[id] {
		if s == typ+"/"+component {
			return true
		}
	}
	return false
}

func watchEvents(t *testing.T, fw *choria.Framework) *eventLog {
	t.Helper()
	conn, err := fw.NewConnector(context.Background(), fw.MiddlewareServers, "it-fidelity-events", fw.Logger("it"))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	l := &eventLog{seen: map[string][]string{}}
	_, err = conn.Nats().Subscribe("choria.lifecycle.event.>", func(m *nats.Msg) {
		// both publish CloudEvents (go-choria servers' default), which go-choria's parser reads
		if lifecycle.EventFormatFromJSON(m.Data) != lifecycle.CloudEventV1Format {
			l.saw("", "not a CloudEvent", string(m.Data))
			return
		}
		ev, err := lifecycle.NewFromJSON(m.Data)
		if err == nil {
			l.saw(ev.Identity(), ev.TypeString(), ev.Component())
		}
	})
	require.NoError(t, err)
	require.NoError(t, conn.Nats().Flush())
	return l
}
