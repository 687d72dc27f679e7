package fleetsim

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/choria-io/go-choria/protocol"
	v2 "github.com/choria-io/go-choria/protocol/v2"
	"github.com/stretchr/testify/require"
)

// goChoriaRequest is a request as a provisioner sends it, built and schema-checked by go-choria.
func goChoriaRequest(t *testing.T) []byte {
	t.Helper()
	req := request(t, "provisioner-caller", "choria_provision", "inventory", map[string]any{"token": "s3cret"})
	body, err := req.JSON()
	require.NoError(t, err)
	sreq := &v2.SecureRequest{Protocol: protocol.SecureRequestV2, MessageBody: body, Signature: []byte("signature"), CallerJWT: "caller.jwt.token"}
	sj, err := sreq.JSON() // validates against the secure request schema
	require.NoError(t, err)
	tm, err := v2.NewTransportMessage("provisioner")
	require.NoError(t, err)
	tm.SetReplyTo("_INBOX.reply.1")
	tm.(*v2.TransportMessage).Data = sj
	j, err := tm.JSON()
	require.NoError(t, err)
	return j
}

// What decodeV2 reads from a go-choria request is what go-choria's own decoding reads.
func TestDecodeV2ReadsAsGoChoria(t *testing.T) {
	data := goChoriaRequest(t)
	got, replyTo, err := decodeV2(data)
	require.NoError(t, err)

	f, err := newFleetForTest(Options{})
	require.NoError(t, err)
	want, wantReplyTo, err := decodeGoChoria(goChoriaV2(), data, f.security)
	require.NoError(t, err)

	require.Equal(t, wantReplyTo, replyTo)
	require.Equal(t, "_INBOX.reply.1", replyTo)
	for _, field := range []struct{ got, want string }{
		{got.RequestID(), want.RequestID()}, {got.Agent(), want.Agent()}, {got.CallerID(), want.CallerID()},
		{got.SenderID(), want.SenderID()}, {got.Collective(), want.Collective()}, {string(got.Message()), string(want.Message())},
	} {
		require.Equal(t, field.want, field.got)
	}
	require.Equal(t, "choria_provision", got.Agent())

	for name, bad := range map[string][]byte{
		"not json":      []byte("{"),
		"v1 transport":  []byte(`{"protocol":"choria:transport:1","data":"","headers":{}}`),
		"no headers":    []byte(`{"protocol":"io.choria.protocol.v2.transport","data":""}`),
		"secure reply":  mustTransport(t, `{"protocol":"io.choria.protocol.v2.secure_reply","reply":"","hash":""}`),
		"reply as body": mustTransport(t, `{"protocol":"io.choria.protocol.v2.secure_request","request":"eyJwcm90b2NvbCI6ImlvLmNob3JpYS5wcm90b2NvbC52Mi5yZXBseSJ9","signature":"","caller":"c"}`),
	} {
		_, _, err := decodeV2(bad)
		require.Error(t, err, name)
	}
}

func mustTransport(t *testing.T, data string) []byte {
	t.Helper()
	j, err := json.Marshal(&v2.TransportMessage{Protocol: protocol.TransportV2, Data: []byte(data), Headers: &v2.TransportHeaders{}})
	require.NoError(t, err)
	return j
}

// encodeV2's replies pass go-choria's schemas and hash check, read back through go-choria as
// sent, and carry the same fields go-choria's constructors write.
func TestEncodeV2WritesAsGoChoria(t *testing.T) {
	f, err := newFleetForTest(Options{})
	require.NoError(t, err)
	req, _, err := decodeV2(goChoriaRequest(t))
	require.NoError(t, err)
	body := []byte(`{"statuscode":0,"statusmsg":"OK","data":{"ok":true}}`)
	out, err := encodeV2(req, "sim-00001.example", body, f.security)
	require.NoError(t, err)

	protocol.ClientStrictValidation = true // go-choria then checks transport and secure reply schemas too
	defer func() { protocol.ClientStrictValidation = false }()
	tm, err := v2.NewTransportFromJSON(out)
	require.NoError(t, err)
	srep, err := v2.NewSecureReplyFromTransport(tm, f.security, false) // false: the hash is checked
	require.NoError(t, err)
	// go-choria 0.30.2's strict reply schema wants a request's protocol (its own replies fail it
	// too): the reply is read as go-choria reads replies by default
	protocol.ClientStrictValidation = false
	rep, err := v2.NewReplyFromSecureReply(srep)
	require.NoError(t, err)
	require.Equal(t, protocol.ReplyV2, rep.Version())
	require.Equal(t, "sim-00001.example", tm.SenderID())
	require.Equal(t, "sim-00001.example", rep.SenderID())
	require.Equal(t, req.RequestID(), rep.RequestID())
	require.Equal(t, "choria_provision", rep.Agent())
	require.JSONEq(t, string(body), string(rep.Message()))

	// go-choria's own encoding of the same reply: the same keys at every level
	gout, err := encodeGoChoria(goChoriaV2(), req, "sim-00001.example", body, f.security)
	require.NoError(t, err)
	require.Equal(t, keysOf(t, gout, "data", "reply"), keysOf(t, out, "data", "reply"))
}

// keysOf lists the keys of a message and of the messages nested in it under the given keys.
func keysOf(t *testing.T, data []byte, nested ...string) [][]string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &m))
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	all := [][]string{keys}
	if len(nested) == 0 {
		return all
	}
	var inner []byte
	require.NoError(t, json.Unmarshal(m[nested[0]], &inner)) // []byte fields are base64 in JSON
	return append(all, keysOf(t, inner, nested[1:]...)...)
}
