package fleetsim

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	v2 "github.com/choria-io/go-choria/protocol/v2"
	"github.com/choria-io/go-choria/providers/agent/mcorpc"
	"github.com/choria-io/go-choria/providers/agent/mcorpc/golang/provision"
	"github.com/stretchr/testify/require"
)

func request(t *testing.T, caller, agent, action string, data map[string]any) *v2.Request {
	t.Helper()
	req, err := v2.NewRequest(agent, "provisioner", caller, 60, "0123456789abcdef0123456789abcdef", "provisioning")
	require.NoError(t, err)
	body, err := json.Marshal(map[string]any{"agent": agent, "action": action, "data": data})
	require.NoError(t, err)
	req.SetMessage(body)
	return req.(*v2.Request)
}

func reply(t *testing.T, f *Fleet, h *Host, caller, agent, action string, data map[string]any) mcorpc.Reply {
	t.Helper()
	b, ok := h.answer(f, request(t, caller, agent, action, data))
	require.True(t, ok)
	var r mcorpc.Reply
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

// The simulated agent keeps go-choria's contract: token checked, lock held by the first caller,
// gen25519 signs the nonce with the key it returns, configure needs a configuration, restart needs
// one written, and a restarted host leaves provisioning mode.
func TestSimulatedAgent(t *testing.T) {
	f := &Fleet{opts: Options{Token: "s3cret", Version: "0.30.2"}, jwt: []byte("the.provisioning.jwt"), keys: newKeyPool(0)}
	h := &Host{Identity: "n1"}

	r := reply(t, f, h, "choria=prov", "choria_provision", "jwt", map[string]any{"token": "wrong"})
	require.Equal(t, mcorpc.Aborted, r.Statuscode)
	require.Equal(t, "Incorrect provision token supplied", r.Statusmsg)

	r = reply(t, f, h, "choria=prov", "choria_provision", "jwt", map[string]any{"token": "s3cret"})
	require.Equal(t, mcorpc.OK, r.Statuscode)
	data := r.Data.(map[string]any)
	require.Equal(t, "the.provisioning.jwt", data["jwt"])
	require.Len(t, data["ecdh_public"], 64)

	r = reply(t, f, h, "choria=other", "choria_provision", "jwt", map[string]any{"token": "s3cret"})
	require.Equal(t, "Could not obtain provisioning lock", r.Statusmsg, "another caller is locked out")

	r = reply(t, f, h, "choria=prov", "choria_provision", "gen25519", map[string]any{"token": "s3cret", "nonce": "n0nce"})
	data = r.Data.(map[string]any)
	pub, _ := hex.DecodeString(data["public_key"].(string))
	sig, _ := hex.DecodeString(data["signature"].(string))
	require.True(t, ed25519.Verify(pub, []byte("n0nce"), sig))

	r = reply(t, f, h, "choria=prov", "choria_provision", "restart", map[string]any{"token": "s3cret"})
	require.Equal(t, mcorpc.Aborted, r.Statuscode, "restart before configure is refused")

	r = reply(t, f, h, "choria=prov", "choria_provision", "configure", map[string]any{"token": "s3cret", "config": `{"plugin.choria.server.provision":"false"}`, "server_jwt": "signed"})
	require.Equal(t, mcorpc.OK, r.Statuscode)
	require.Equal(t, "signed", h.ServerJWT)

	r = reply(t, f, h, "choria=prov", "rpcutil", "inventory", nil)
	require.Equal(t, "0.30.2", r.Data.(map[string]any)["version"])

	r = reply(t, f, h, "choria=prov", "choria_provision", "restart", map[string]any{"token": "s3cret"})
	require.Equal(t, mcorpc.OK, r.Statuscode)
}

func TestLockErrorKnobFailsTheFirstCallOnly(t *testing.T) {
	f := &Fleet{opts: Options{}, jwt: []byte("j"), keys: newKeyPool(0)}
	h := &Host{Identity: "n1", lockFail: map[string]bool{"jwt": true}}
	require.Equal(t, "Could not obtain provisioning lock", reply(t, f, h, "c", "choria_provision", "jwt", nil).Statusmsg)
	require.Equal(t, mcorpc.OK, reply(t, f, h, "c", "choria_provision", "jwt", nil).Statuscode)
}

// gencsr makes a real CSR per host, signed by the key whose public half it returns, with the
// identity as common name unless one is asked for, and the requested subject fields.
func TestGencsr(t *testing.T) {
	f := &Fleet{opts: Options{Token: "s3cret"}, jwt: []byte("j"), keys: newKeyPool(0)}
	h := &Host{Identity: "n1.example"}
	r := reply(t, f, h, "c", "choria_provision", "gencsr", map[string]any{"token": "wrong"})
	require.Equal(t, "Incorrect provision token supplied", r.Statusmsg)
	r = reply(t, f, h, "c", "choria_provision", "gencsr", map[string]any{"token": "s3cret", "O": "Choria", "OU": "ops", "C": "MT", "L": "Valletta"})
	require.Equal(t, mcorpc.OK, r.Statuscode, r.Statusmsg)
	data := r.Data.(map[string]any)
	require.Equal(t, "/etc/choria/ssl", data["ssldir"])
	block, _ := pem.Decode([]byte(data["csr"].(string)))
	require.NotNil(t, block)
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	require.NoError(t, err)
	require.NoError(t, csr.CheckSignature())
	require.Equal(t, "n1.example", csr.Subject.CommonName)
	require.Equal(t, []string{"Choria"}, csr.Subject.Organization)
	require.Equal(t, []string{"ops"}, csr.Subject.OrganizationalUnit)
	require.Equal(t, []string{"MT"}, csr.Subject.Country)
	require.Equal(t, []string{"Valletta"}, csr.Subject.Locality)
	pb, _ := pem.Decode([]byte(data["public_key"].(string)))
	pub, err := x509.ParsePKCS1PublicKey(pb.Bytes)
	require.NoError(t, err)
	require.True(t, pub.Equal(csr.PublicKey))

	r = reply(t, f, h, "c", "choria_provision", "gencsr", map[string]any{"token": "s3cret", "cn": "other.example"})
	block, _ = pem.Decode([]byte(r.Data.(map[string]any)["csr"].(string)))
	csr, err = x509.ParseCertificateRequest(block.Bytes)
	require.NoError(t, err)
	require.Equal(t, "other.example", csr.Subject.CommonName)
}

// release_update is refused when the provisioning JWT does not allow it, and a bad repository
// fails with go-updater's error inside go-choria's message; the host stays in provisioning mode.
func TestReleaseUpdateErrors(t *testing.T) {
	f := &Fleet{opts: Options{Token: "s3cret", ScratchDir: t.TempDir()}, jwt: []byte("j"), keys: newKeyPool(0)}
	h := &Host{Identity: "n1"}
	r := reply(t, f, h, "c", "choria_provision", "release_update", map[string]any{"token": "s3cret", "repository": "http://127.0.0.1:1/repo", "version": "0.99.0"})
	require.Equal(t, "Version updates is not enabled in the configuration", r.Statusmsg)
	f.allowUpdate = true
	r = reply(t, f, h, "c", "choria_provision", "release_update", map[string]any{"token": "s3cret", "repository": "http://127.0.0.1:1/repo", "version": "0.99.0"})
	require.Equal(t, mcorpc.Aborted, r.Statuscode)
	require.Contains(t, r.Statusmsg, "Update to version 0.99.0 failed, release rolled back: release 0.99.0 not found")
	require.Equal(t, map[string]any{}, r.Data, "an aborted reply carries empty data, as mcorpc's")
	require.Equal(t, mcorpc.OK, reply(t, f, h, "c", "rpcutil", "ping", nil).Statuscode)
	r = reply(t, f, h, "c", "choria_provision", "reprovision", map[string]any{"token": "s3cret"})
	require.Equal(t, "Server is already in provisioning mode, cannot enable provisioning mode again", r.Statusmsg)
}

func TestAgentInventoryAndUnknownAction(t *testing.T) {
	f := &Fleet{opts: Options{Version: "0.30.2"}, jwt: []byte("j"), keys: newKeyPool(0)}
	h := &Host{Identity: "n1"}
	r := reply(t, f, h, "c", "rpcutil", "agent_inventory", nil)
	agents := r.Data.(map[string]any)["agents"].([]any)
	require.Len(t, agents, len(simAgents))
	require.Equal(t, "choria_provision", agents[0].(map[string]any)["agent"])
	require.Equal(t, "0.30.2", agents[0].(map[string]any)["version"])
	r = reply(t, f, h, "c", "choria_provision", "nope", nil)
	require.Equal(t, mcorpc.UnknownAction, r.Statuscode)
	require.Equal(t, "Unknown action nope for agent choria_provision", r.Statusmsg)
}

// A flaky host fails its first K RPCs (dropped or answered with an error), then behaves.
func TestFlakyHosts(t *testing.T) {
	f, err := newFleetForTest(Options{Count: 20, Flaky: 0.1, FlakyRequests: 2, FlakyMode: FlakyError})
	require.NoError(t, err)
	var flaky []*Host
	for _, h := range f.order {
		if h.flaky {
			flaky = append(flaky, h)
		}
	}
	require.Len(t, flaky, 2)
	h := flaky[0]
	for i := 0; i < 2; i++ {
		r := reply(t, f, h, "c", "rpcutil", "ping", nil)
		require.Equal(t, FlakyMessage, r.Statusmsg)
	}
	require.Equal(t, mcorpc.OK, reply(t, f, h, "c", "rpcutil", "ping", nil).Statuscode)

	// the flaky period in a synctest bubble: its clock (what the host reads its period by) moves
	// only as the test sleeps, so "still flaky just before the end" is exact, not a bet on the machine
	f, err = newFleetForTest(Options{Count: 10, Flaky: 0.1, FlakyFor: 200 * time.Millisecond})
	require.NoError(t, err)
	h = f.order[9]
	require.True(t, h.flaky)
	synctest.Test(t, func(t *testing.T) {
		_, ok := h.answer(f, request(t, "c", "rpcutil", "ping", nil))
		require.False(t, ok, "dropped while flaky")
		time.Sleep(200*time.Millisecond - time.Nanosecond)
		_, ok = h.answer(f, request(t, "c", "rpcutil", "ping", nil))
		require.False(t, ok, "still dropped just before the flaky period ends")
		time.Sleep(time.Nanosecond)
		_, ok = h.answer(f, request(t, "c", "rpcutil", "ping", nil))
		require.True(t, ok, "answers once the flaky period is over")
	})
}

func newFleetForTest(o Options) (*Fleet, error) {
	dir, err := os.MkdirTemp("", "fleetsim-test-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	o.ProvisioningJWT = filepath.Join(dir, "provisioning.jwt")
	if err := os.WriteFile(o.ProvisioningJWT, []byte("not.a.jwt"), 0o600); err != nil {
		return nil, err
	}
	return newFleet(o)
}

// BenchmarkGencsr is the CPU cost of one gencsr: a fresh 2048-bit key (as real servers) or a
// pooled one (--key-pool).
func BenchmarkGencsr(b *testing.B) {
	for _, pool := range []int{0, 4} {
		b.Run(fmt.Sprintf("key-pool=%d", pool), func(b *testing.B) {
			f := &Fleet{opts: Options{}, jwt: []byte("j"), keys: newKeyPool(pool)}
			h := &Host{Identity: "n1"}
			for i := 0; i < b.N; i++ {
				if _, err := h.csr(f, &provision.CSRRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Credentials counts configure calls that wrote credentials other than the last ones: a retry
// of the same step writes the same ones; a second run's configure (a new key, a new JWT) does not.
func TestCredentialsCountsDifferentWrites(t *testing.T) {
	f := &Fleet{opts: Options{Token: "s3cret"}, keys: newKeyPool(0)}
	h := &Host{Identity: "n1"}
	configure := func(jwt string) {
		r := reply(t, f, h, "choria=prov", "choria_provision", "configure", map[string]any{"token": "s3cret", "config": `{"plugin.choria.server.provision":"false"}`, "server_jwt": jwt})
		require.Equal(t, mcorpc.OK, r.Statuscode)
	}
	configure("first")
	configure("first")
	require.EqualValues(t, 2, h.Configures.Load())
	require.EqualValues(t, 1, h.Credentials.Load(), "the same credentials written again")
	configure("second")
	require.EqualValues(t, 2, h.Credentials.Load(), "different credentials")
}

func TestReplyDelayNamesActions(t *testing.T) {
	f := &Fleet{opts: Options{ReplyDelay: map[string]time.Duration{"restart": 3 * time.Second}}}
	require.Equal(t, 3*time.Second, f.replyDelay(request(t, "c", "choria_provision", "restart", nil)))
	require.Zero(t, f.replyDelay(request(t, "c", "choria_provision", "configure", nil)))
	require.Zero(t, f.replyDelay(request(t, "c", "rpcutil", "restart", nil)))
}
