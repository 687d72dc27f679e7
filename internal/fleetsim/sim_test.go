package fleetsim

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"testing"

	v2 "github.com/choria-io/go-choria/protocol/v2"
	"github.com/choria-io/go-choria/providers/agent/mcorpc"
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
	f := &Fleet{opts: Options{Token: "s3cret", Version: "0.30.2"}, jwt: []byte("the.provisioning.jwt")}
	h := &Host{Identity: "n1", lockFail: map[string]bool{}}

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
	f := &Fleet{opts: Options{}, jwt: []byte("j")}
	h := &Host{Identity: "n1", lockFail: map[string]bool{"jwt": true}}
	require.Equal(t, "Could not obtain provisioning lock", reply(t, f, h, "c", "choria_provision", "jwt", nil).Statusmsg)
	require.Equal(t, mcorpc.OK, reply(t, f, h, "c", "choria_provision", "jwt", nil).Statuscode)
}
