package codec

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/choria-temporal/provisioner/internal/testpki"
)

func TestRoundTripAndNoPlaintext(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	dc := DataConverter(c)
	p, err := dc.ToPayload(map[string]string{"server_jwt": "eyJhbGciOi.secret-token"})
	require.NoError(t, err)
	require.False(t, bytes.Contains(p.Data, []byte("secret-token")))
	require.Equal(t, EncodingName, string(p.Metadata[MetadataEncoding]))
	require.Equal(t, c.ActiveKeyID(), string(p.Metadata[MetadataKeyID]))

	var back map[string]string
	require.NoError(t, dc.FromPayload(p, &back))
	require.Equal(t, "eyJhbGciOi.secret-token", back["server_jwt"])
}

func TestRotationKeepsOldPayloadsReadable(t *testing.T) {
	oldKey, newKey := NewKey(), NewKey()
	old, err := New(oldKey)
	require.NoError(t, err)
	p, err := DataConverter(old).ToPayload("written with the old key")
	require.NoError(t, err)

	rotated, err := New(newKey, oldKey)
	require.NoError(t, err)
	var s string
	require.NoError(t, DataConverter(rotated).FromPayload(p, &s))
	require.Equal(t, "written with the old key", s)
	np, err := DataConverter(rotated).ToPayload("new")
	require.NoError(t, err)
	require.NotEqual(t, string(p.Metadata[MetadataKeyID]), string(np.Metadata[MetadataKeyID]))

	stranger, err := New(NewKey())
	require.NoError(t, err)
	_, err = stranger.Decode([]*commonpb.Payload{p})
	require.ErrorIs(t, err, ErrUnknownKey)
}

func TestTamperingIsDetected(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	p, err := DataConverter(c).ToPayload("x")
	require.NoError(t, err)
	p.Data[len(p.Data)-1] ^= 1
	_, err = c.Decode([]*commonpb.Payload{p})
	require.Error(t, err)
}

// Operators' tools (the codec server, the CLI) show what is not encrypted as it is.
func TestOperatorCodecPassesPlainPayloadsThrough(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	plain, err := converter.GetDefaultDataConverter().ToPayload("plain")
	require.NoError(t, err)
	out, err := c.Decode([]*commonpb.Payload{plain})
	require.NoError(t, err)
	require.Equal(t, plain, out[0])
}

func TestBadKeys(t *testing.T) {
	_, err := New()
	require.Error(t, err)
	_, err = New("abcd")
	require.Error(t, err)
	_, err = New("zz" + NewKey()[2:])
	require.Error(t, err)
}

func TestServerDecodesForAuthorisedCallersOnly(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(c, ServerOptions{Token: "s3cret-token", Origins: []string{"http://127.0.0.1:8233"}}))
	defer srv.Close()

	enc, err := DataConverter(c).ToPayload("the signed server JWT")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)

	post := func(auth string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://127.0.0.1:8233")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	for _, bad := range []string{"", "Bearer wrong", "s3cret-token", "Basic s3cret-token"} {
		resp := post(bad)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, bad)
		resp.Body.Close()
	}
	resp := post("Bearer s3cret-token")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "http://127.0.0.1:8233", resp.Header.Get("Access-Control-Allow-Origin"))
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var decoded commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(out, &decoded))
	var s string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(decoded.Payloads[0], &s))
	require.Equal(t, "the signed server JWT", s)

	req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/decode", nil)
	req.Header.Set("Origin", "http://evil.example")
	pre, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	pre.Body.Close()
	require.Empty(t, pre.Header.Get("Access-Control-Allow-Origin"), "unknown origins get no CORS grant")
}

// The dev stack's Web UI has no login to pass a token from: with DevTrustOrigins its origin is
// served without one, while other origins and callers without an origin still need the token.
func TestDevTrustOriginsServesOnlyTheUIOrigin(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	const ui = "http://127.0.0.1:8233"
	addr, err := Serve(t.Context(), "127.0.0.1:0", c, ServerOptions{Token: "s3cret-token-0123456789", Origins: []string{ui}, DevTrustOrigins: true})
	require.NoError(t, err)

	enc, err := DataConverter(c).ToPayload("decoded for the UI")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)
	post := func(origin, auth string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Namespace", "default")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, post(ui, ""), "the UI's origin needs no token")
	require.Equal(t, http.StatusUnauthorized, post("http://evil.example", ""), "another origin does")
	require.Equal(t, http.StatusUnauthorized, post("", ""), "a caller without an origin does")
	require.Equal(t, http.StatusOK, post("", "Bearer s3cret-token-0123456789"), "the token still works")

	// without the switch the UI's origin needs the token like everyone else
	strict := httptest.NewServer(Handler(c, ServerOptions{Token: "s3cret-token-0123456789", Origins: []string{ui}}))
	defer strict.Close()
	req, _ := http.NewRequest(http.MethodPost, strict.URL+"/decode", bytes.NewReader(body))
	req.Header.Set("Origin", ui)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestDevTrustOriginsRefusesNonLoopbackListeners(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	o := ServerOptions{Token: "s3cret-token-0123456789", Origins: []string{"http://127.0.0.1:8233"}, DevTrustOrigins: true}
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:8081", "ui.example.net:8081"} {
		_, err := Serve(t.Context(), addr, c, o)
		require.ErrorIs(t, err, ErrNotLoopback, addr)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		_, err := Serve(t.Context(), addr, c, o)
		require.NoError(t, err, addr)
	}
	// refused before it binds: on a port already taken the refusal, not the bind's error
	held := mustListen(t)
	_, err = Serve(t.Context(), held.Addr().String(), c, ServerOptions{Token: "s3cret-token-0123456789", DevTrustOrigins: true})
	require.ErrorContains(t, err, "needs the origins", "the switch needs the origins it trusts")

	// a listener bound beforehand is held to the same rule, and closed when refused (a stand-in
	// that says it is bound to all interfaces: the test binds nothing but loopback)
	wide := &addrListener{Listener: mustListen(t), addr: &net.TCPAddr{IP: net.IPv4zero, Port: 8081}}
	_, err = ServeListener(t.Context(), wide, c, o)
	require.ErrorIs(t, err, ErrNotLoopback)
	_, err = wide.Accept()
	require.ErrorIs(t, err, net.ErrClosed, "a refused listener is closed")
	addr, err := ServeListener(t.Context(), mustListen(t), c, o)
	require.NoError(t, err)
	resp, err := http.Get("http://" + addr + "/decode")
	require.NoError(t, err, "the held listener serves")
	resp.Body.Close()
}

// addrListener reports another address than the one it is bound to.
type addrListener struct {
	net.Listener
	addr net.Addr
}

func (l *addrListener) Addr() net.Addr { return l.addr }

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// With ServerOptions.TLS the codec server speaks HTTPS only, with the token still required.
func TestServeHTTPS(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	pki := testpki.New(t, "Codec Test CA")
	cert, key := pki.Leaf(t, "codec", "codec.example.test", nil)
	pair, err := tls.LoadX509KeyPair(cert, key)
	require.NoError(t, err)
	addr, err := Serve(t.Context(), "127.0.0.1:0", c, ServerOptions{Token: "s3cret-token-0123456789", TLS: &tls.Config{Certificates: []tls.Certificate{pair}}})
	require.NoError(t, err)
	enc, err := DataConverter(c).ToPayload("payload")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool()}}}
	post := func(url, auth string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url+"/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		return client.Do(req)
	}
	resp, err := post("https://"+addr, "Bearer s3cret-token-0123456789")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = post("https://"+addr, "Bearer wrong")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, err = post("http://"+addr, "Bearer s3cret-token-0123456789")
	if err == nil {
		resp.Body.Close()
		require.NotEqual(t, http.StatusOK, resp.StatusCode, "plain HTTP is not decoded")
	}
}
