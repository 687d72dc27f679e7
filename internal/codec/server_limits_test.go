package codec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestCodecServerRefusesLargeBodies(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(c, ServerOptions{Token: "s3cret-token-0123456789"}))
	defer srv.Close()
	post := func(body io.Reader, size int64) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decode", body)
		req.ContentLength = size
		req.Header.Set("Authorization", "Bearer s3cret-token-0123456789")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	huge := bytes.Repeat([]byte("x"), 10<<20)
	require.Equal(t, http.StatusRequestEntityTooLarge, post(bytes.NewReader(huge), int64(len(huge))), "10 MiB with its length")
	require.Equal(t, http.StatusRequestEntityTooLarge, post(io.MultiReader(bytes.NewReader(huge)), -1), "10 MiB chunked")

	// the largest payload Temporal takes (2 MiB by default) still decodes
	enc, err := DataConverter(c).ToPayload(strings.Repeat("y", 2<<20-64))
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, post(bytes.NewReader(body), int64(len(body))))
}

// Any local process can send the Web UI's Origin: with --dev-trust-origins, a request without
// a token is served only when its socket belongs to the codec server's own user.
func TestDevTrustOriginsNeedsTheSameUser(t *testing.T) {
	cd, err := New(NewKey())
	require.NoError(t, err)
	const ui = "http://127.0.0.1:8233"
	body := encodedBody(t, cd)
	me := uint32(os.Getuid())
	for name, c := range map[string]struct {
		uid  func(netip.AddrPort, netip.AddrPort) (uint32, error)
		want int
	}{
		"this user":      {func(netip.AddrPort, netip.AddrPort) (uint32, error) { return me, nil }, http.StatusOK},
		"another user":   {func(netip.AddrPort, netip.AddrPort) (uint32, error) { return me + 1, nil }, http.StatusUnauthorized},
		"unknown peer":   {func(netip.AddrPort, netip.AddrPort) (uint32, error) { return 0, errNoPeer }, http.StatusUnauthorized},
		"no proc access": {func(netip.AddrPort, netip.AddrPort) (uint32, error) { return 0, errors.New("permission denied") }, http.StatusUnauthorized},
	} {
		srv := httptest.NewServer(Handler(cd, ServerOptions{Token: "s3cret-token-0123456789", Origins: []string{ui}, DevTrustOrigins: true, peerUID: c.uid}))
		require.Equal(t, c.want, postFrom(t, srv.URL, ui, body), name)
		srv.Close()
	}
	// a codec server in a container names the host user whose browser it serves
	srv := httptest.NewServer(Handler(cd, ServerOptions{Token: "s3cret-token-0123456789", Origins: []string{ui}, DevTrustOrigins: true,
		DevTrustUIDs: []uint32{me + 1}, peerUID: func(netip.AddrPort, netip.AddrPort) (uint32, error) { return me + 1, nil }}))
	defer srv.Close()
	require.Equal(t, http.StatusOK, postFrom(t, srv.URL, ui, body), "a named user")
}

func encodedBody(t *testing.T, c *Codec) []byte {
	t.Helper()
	enc, err := DataConverter(c).ToPayload("decoded for the UI")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)
	return body
}

func postFrom(t *testing.T, url, origin string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/decode", bytes.NewReader(body))
	req.Header.Set("Origin", origin)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// The kernel's socket table names the user at the other end of a loopback connection.
func TestLoopbackPeerUIDIsTheConnectingProcesssUser(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[network]
		l, err := net.Listen(network, addr)
		if err != nil && network == "tcp6" {
			continue // no IPv6 loopback on this host
		}
		require.NoError(t, err)
		accepted := make(chan net.Conn, 1)
		go func() { c, _ := l.Accept(); accepted <- c }()
		client, err := net.Dial(network, l.Addr().String())
		require.NoError(t, err)
		server := <-accepted
		uid, err := loopbackPeerUID(netip.MustParseAddrPort(server.LocalAddr().String()), netip.MustParseAddrPort(server.RemoteAddr().String()))
		require.NoError(t, err, network)
		require.Equal(t, uint32(os.Getuid()), uid, network)
		_, err = loopbackPeerUID(netip.MustParseAddrPort(server.LocalAddr().String()), netip.MustParseAddrPort("127.0.0.1:1"))
		require.ErrorIs(t, err, errNoPeer, network)
		client.Close()
		server.Close()
		l.Close()
	}
}

// A process of another user sends the UI's Origin to a --dev-trust-origins server: refused.
// Starting a process as another user takes root, which the CI and the dev stack's tests run as.
func TestDevTrustOriginsRefusesAnotherUsersProcess(t *testing.T) {
	if url := os.Getenv("CODEC_TEST_POST_URL"); url != "" {
		fmt.Println(postFrom(t, url, os.Getenv("CODEC_TEST_ORIGIN"), []byte(`{"payloads":[]}`)))
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user; TestDevTrustOriginsNeedsTheSameUser covers the decision")
	}
	cd, err := New(NewKey())
	require.NoError(t, err)
	const ui = "http://127.0.0.1:8233"
	addr, err := Serve(t.Context(), "127.0.0.1:0", cd, ServerOptions{Token: "s3cret-token-0123456789", Origins: []string{ui}, DevTrustOrigins: true})
	require.NoError(t, err)
	// this test binary, run as nobody, is the other user's process
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	for d := filepath.Dir(dir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	bin := filepath.Join(dir, "codec.test")
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	as := func(uid uint32) string {
		cmd := exec.Command(bin, "-test.run=^TestDevTrustOriginsRefusesAnotherUsersProcess$")
		cmd.Env = []string{"CODEC_TEST_POST_URL=http://" + addr, "CODEC_TEST_ORIGIN=" + ui}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.Fields(string(out))[0]
	}
	require.Equal(t, "401", as(65534), "another user's process with the UI's Origin")
	require.Equal(t, "200", as(0), "this user's")
}

// The codec server's token: at least MinTokenLength characters from the environment or the
// file, and a file others can read is refused with the fix.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	long := strings.Repeat("k", MinTokenLength)
	require.NoError(t, os.WriteFile(file, []byte(long+"\n"), 0o600))
	tok, err := ReadToken(file)
	require.NoError(t, err)
	require.Equal(t, long, tok)

	require.NoError(t, os.WriteFile(file, []byte(long[1:]+"\n"), 0o600))
	_, err = ReadToken(file)
	require.ErrorContains(t, err, "has 31 characters, at least 32 are required")

	require.NoError(t, os.WriteFile(file, []byte(long+"\n"), 0o600))
	require.NoError(t, os.Chmod(file, 0o644))
	_, err = ReadToken(file)
	require.ErrorContains(t, err, "is readable by others (mode 0644)")
	require.ErrorContains(t, err, "chmod 600 "+file)

	t.Setenv(ServerTokenEnv, "short-token")
	_, err = ReadToken(file)
	require.ErrorContains(t, err, ServerTokenEnv+") has 11 characters")
	t.Setenv(ServerTokenEnv, long+"-from-env")
	tok, err = ReadToken("")
	require.NoError(t, err)
	require.Equal(t, long+"-from-env", tok)
}
