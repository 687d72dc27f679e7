package integration

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	cpc "github.com/choria-io/go-choria/client/choria_provisionclient"
	"github.com/choria-io/go-choria/client/rpcutilclient"
	"github.com/choria-io/go-choria/protocol"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/discovery"
	"github.com/choria-temporal/provisioner/internal/service"
)

// wire is one request as captured on the broker, layer by layer.
type wire struct {
	raw       []byte
	transport map[string]any
	secure    map[string]any
	request   map[string]any
	rawSecure []byte
	rawReq    []byte
	body      []byte
}

func decodeWire(t *testing.T, raw []byte) *wire {
	t.Helper()
	w := &wire{raw: raw}
	var tr struct {
		Data []byte `json:"data"`
	}
	require.NoError(t, json.Unmarshal(raw, &tr))
	require.NoError(t, json.Unmarshal(raw, &w.transport))
	w.rawSecure = tr.Data
	var sr struct {
		Request []byte `json:"request"`
	}
	require.NoError(t, json.Unmarshal(w.rawSecure, &sr))
	require.NoError(t, json.Unmarshal(w.rawSecure, &w.secure))
	w.rawReq = sr.Request
	var rq struct {
		Message []byte `json:"message"`
	}
	require.NoError(t, json.Unmarshal(w.rawReq, &rq))
	require.NoError(t, json.Unmarshal(w.rawReq, &w.request))
	w.body = rq.Message
	return w
}

// The requests the activities build and sign themselves are go-choria's: captured on a real
// broker next to the same request from go-choria's generated client, every layer has the same
// fields and values (but the request's own ID, time and signature), validates against
// go-choria's protocol schemas, and decodes and verifies as a go-choria server decodes a
// request; and a real go-choria server answers them as it answers go-choria's client.
func TestIntegrationRPCWire(t *testing.T) {
	e := newEnv(t, envOptions{servers: 1})
	real := e.stack.Fleet.Members[0].Identity
	fw, err := service.NewChoriaClientFramework(e.cfg, discovery.ProvisioningCollective)
	require.NoError(t, err)
	shared := activities.NewSharedFramework(fw)
	t.Cleanup(shared.Close)
	req := activities.NewRequester(shared)
	require.True(t, req.BuildsRequests(), "protocol v2 site: requests are built by the activities")
	ctx := context.Background()

	conn, err := fw.NewConnector(ctx, fw.MiddlewareServers, "wire-capture", fw.Logger("test"))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	captured := make(chan *nats.Msg, 4)
	sub, err := conn.Nats().ChanSubscribe("provisioning.node.wire-probe", captured)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, conn.Nats().Flush())
	next := func() *wire {
		select {
		case m := <-captured:
			return decodeWire(t, m.Data)
		case <-time.After(10 * time.Second):
			t.Fatal("no request captured")
			return nil
		}
	}

	// configure has the most inputs, with DDL defaults for the ones not given
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 300*time.Millisecond) }
	c1, cancel := short()
	replies, err := req.Call(c1, "wire-probe", "choria_provision", "configure", map[string]any{"config": `{"identity":"wire-probe"}`, "token": "s3cret", "server_jwt": "x.y.z"})
	cancel()
	require.NoError(t, err)
	require.Empty(t, replies)
	ours := next()

	pc, err := cpc.New(fw)
	require.NoError(t, err)
	c2, cancel := short()
	_, _ = pc.OptionTargets([]string{"wire-probe"}).OptionWorkers(1).Configure(`{"identity":"wire-probe"}`).Token("s3cret").ServerJwt("x.y.z").Do(c2)
	cancel()
	theirs := next()

	// the mcorpc request, byte for byte
	require.Equal(t, string(theirs.body), string(ours.body))
	// every envelope field but the request's own id and time
	id := ours.request["id"].(string)
	require.NotEqual(t, theirs.request["id"], id)
	for _, w := range []*wire{ours, theirs} {
		delete(w.request, "id")
		delete(w.request, "time")
		delete(w.request, "message")
	}
	require.Equal(t, theirs.request, ours.request)
	// the secure request: same caller JWT, a signature of its own request
	require.Equal(t, theirs.secure["caller"], ours.secure["caller"])
	require.Equal(t, theirs.secure["protocol"], ours.secure["protocol"])
	require.ElementsMatch(t, keys(theirs.secure), keys(ours.secure))
	// the transport: same headers, each with a reply subject for its own request
	oh, th := ours.transport["headers"].(map[string]any), theirs.transport["headers"].(map[string]any)
	require.Regexp(t, regexp.MustCompile(`^provisioning\.reply\.[0-9a-f]{32}\.`+id+`$`), oh["reply"])
	require.Equal(t, th["reply"].(string)[:len("provisioning.reply.")+32], oh["reply"].(string)[:len("provisioning.reply.")+32])
	delete(oh, "reply")
	delete(th, "reply")
	require.Equal(t, th, oh)
	require.Equal(t, theirs.transport["protocol"], ours.transport["protocol"])
	require.ElementsMatch(t, keys(theirs.transport), keys(ours.transport))

	// go-choria's schemas accept every layer
	for _, layer := range []struct {
		v    protocol.ProtocolVersion
		data []byte
	}{{protocol.TransportV2, ours.raw}, {protocol.SecureRequestV2, ours.rawSecure}, {protocol.RequestV2, ours.rawReq}} {
		valid, errs, err := protocol.SchemaValidate(layer.v, layer.data)
		require.NoError(t, err, layer.v)
		require.True(t, valid, "%s: %v", layer.v, errs)
	}
	// ... and it decodes, its signature verified against the caller's JWT, as a server decodes a request
	decoded, err := fw.NewRequestFromTransportJSON(ours.raw, false)
	require.NoError(t, err)
	require.Equal(t, id, decoded.RequestID())
	require.Equal(t, "choria_provision", decoded.Agent())
	require.Equal(t, string(ours.body), string(decoded.Message()))

	// a real server answers them as it answers go-choria's client
	rc, err := rpcutilclient.New(fw)
	require.NoError(t, err)
	inv, err := rc.OptionTargets([]string{real}).OptionWorkers(1).Inventory().Do(ctx)
	require.NoError(t, err)
	require.Len(t, inv.AllOutputs(), 1)
	want, err := inv.AllOutputs()[0].JSON()
	require.NoError(t, err)
	c3, cancel := context.WithTimeout(ctx, 10*time.Second)
	got, err := req.Call(c3, real, "rpcutil", "inventory", map[string]any{})
	cancel()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, real, got[0].Sender)
	require.Equal(t, 0, got[0].Code)
	gj, err := json.Marshal(got[0].Data)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(gj))

	c4, cancel := context.WithTimeout(ctx, 10*time.Second)
	got, err = req.Call(c4, real, "choria_provision", "jwt", map[string]any{"token": e.cfg.Token})
	cancel()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 0, got[0].Code, got[0].Message)
	require.NotEmpty(t, got[0].Data["jwt"])
	require.NotEmpty(t, got[0].Data["ecdh_public"])
	c5, cancel := context.WithTimeout(ctx, 10*time.Second)
	got, err = req.Call(c5, real, "choria_provision", "jwt", map[string]any{"token": "wrong"})
	cancel()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NotEqual(t, 0, got[0].Code)
	require.Contains(t, got[0].Message, "Incorrect provision token")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
