package service

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/testnet"
	"github.com/choria-temporal/provisioner/internal/testpki"
)

// tlsServer accepts TLS connections requiring a client certificate from pki and reports the
// common name each client presented.
func tlsServer(t *testing.T, pki *testpki.PKI) (string, <-chan string) {
	t.Helper()
	cert, key := pki.Leaf(t, "server", "server", nil)
	pair, err := tls.LoadX509KeyPair(cert, key)
	require.NoError(t, err)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: pki.Pool(), MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	names := make(chan string, 10)
	testnet.Serve(t, l, func(c net.Conn) {
		tc := c.(*tls.Conn)
		if tc.Handshake() != nil {
			return
		}
		names <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
		_, _ = c.Write([]byte{1})
	})
	return l.Addr().String(), names
}

// A client certificate rewritten on disk is presented from the next handshake on, by the same
// tls.Config; a half-written or mismatched pair keeps the previous one, with one warning.
func TestClientCertificateReloadedWhenFilesChange(t *testing.T) {
	pki := testpki.New(t, "Reload Test CA")
	addr, names := tlsServer(t, pki)
	cert, key := pki.Leaf(t, "client", "client-v1", nil)
	core, logs := observer.New(zapcore.InfoLevel)
	tc, err := TemporalTLS(config.TLS{CAFile: pki.CAFile, CertFile: cert, KeyFile: key, ServerName: "localhost"}, zap.New(core))
	require.NoError(t, err)
	presented := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", addr, tc)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
		require.NoError(t, err)
		select {
		case n := <-names:
			return n
		case <-time.After(5 * time.Second):
			t.Fatal("the server saw no client certificate")
			return ""
		}
	}
	require.Equal(t, "client-v1", presented())
	require.Equal(t, "client-v1", presented())

	pki.Leaf(t, "client", "client-v2", nil) // same files, new key pair
	require.Equal(t, "client-v2", presented())
	require.Equal(t, 1, logs.FilterMessage("Temporal client certificate reloaded").Len())

	// a key that does not match the certificate (rotation half done): the previous pair goes on
	_, otherKey := pki.Leaf(t, "other", "other", nil)
	b, err := os.ReadFile(otherKey)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(key, b, 0o600))
	require.Equal(t, "client-v2", presented())
	require.Equal(t, "client-v2", presented())
	require.Equal(t, 1, logs.FilterMessageSnippet("does not load").Len(), "one warning per bad state")

	pki.Leaf(t, "client", "client-v3", nil)
	require.Equal(t, "client-v3", presented())
}

func TestTLSOffAndInsecureSkipVerify(t *testing.T) {
	tc, err := TemporalTLS(config.TLS{}, zap.NewNop())
	require.NoError(t, err)
	require.Nil(t, tc, "no temporal.tls keys: plaintext")

	core, logs := observer.New(zapcore.WarnLevel)
	tc, err = TemporalTLS(config.TLS{InsecureSkipVerify: true}, zap.New(core))
	require.NoError(t, err)
	require.True(t, tc.InsecureSkipVerify)
	require.Equal(t, 1, logs.FilterMessageSnippet("insecure_skip_verify is set").Len())

	tc, err = TemporalTLS(config.TLS{Enabled: true}, zap.NewNop())
	require.NoError(t, err)
	require.NotNil(t, tc)
	require.Nil(t, tc.RootCAs, "enabled alone: the system's CAs")
	require.Nil(t, tc.GetClientCertificate)
}

// systemInfoServer is a gRPC WorkflowService over TLS that answers GetSystemInfo (what the SDK
// calls when it dials) and records the authorization header; key is the API key it accepts.
type systemInfoServer struct {
	workflowservice.UnimplementedWorkflowServiceServer
	mu   sync.Mutex
	auth []string
	key  string
}

func (s *systemInfoServer) GetSystemInfo(ctx context.Context, _ *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = append(s.auth, md.Get("authorization")...)
	if len(md.Get("authorization")) == 0 || md.Get("authorization")[0] != "Bearer "+s.key {
		return nil, status.Error(codes.Unauthenticated, "Request unauthorized.")
	}
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func (s *systemInfoServer) lastAuth() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.auth) == 0 {
		return ""
	}
	return s.auth[len(s.auth)-1]
}

// The API key from temporal.api_key_file travels as a bearer token over TLS, is read again when
// the file changes, and a refused key is named in the dial error.
func TestAPIKeyOverTLS(t *testing.T) {
	pki := testpki.New(t, "API Key Test CA")
	cert, key := pki.Leaf(t, "server", "temporal.example.test", nil)
	pair, err := tls.LoadX509KeyPair(cert, key)
	require.NoError(t, err)
	srv := &systemInfoServer{key: "key-one"}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}})))
	workflowservice.RegisterWorkflowServiceServer(g, srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)

	keyFile := filepath.Join(t.TempDir(), "api.key")
	require.NoError(t, os.WriteFile(keyFile, []byte("key-one\n"), 0o600))
	cfg := &config.Config{Temporal: config.Temporal{Address: l.Addr().String(), Namespace: "ns", Plaintext: true,
		TLS: config.TLS{CAFile: pki.CAFile, ServerName: "temporal.example.test"}, APIKeyFile: keyFile}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := DialTemporal(ctx, cfg, zap.NewNop())
	require.NoError(t, err)
	require.Equal(t, "Bearer key-one", srv.lastAuth())

	// rotation: the next call carries the new key, without a new client
	srv.mu.Lock()
	srv.key = "key-two"
	srv.mu.Unlock()
	require.NoError(t, os.WriteFile(keyFile+".new", []byte("key-two\n"), 0o600))
	require.NoError(t, os.Rename(keyFile+".new", keyFile))
	_, err = c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{})
	require.NoError(t, err)
	require.Equal(t, "Bearer key-two", srv.lastAuth())
	c.Close()

	// a key the server refuses
	require.NoError(t, os.WriteFile(keyFile, []byte("revoked\n"), 0o600))
	_, err = DialTemporal(ctx, cfg, zap.NewNop())
	require.ErrorContains(t, err, "the frontend refused the API key in temporal.api_key_file "+keyFile)

	// the environment's key, static
	cfg.Temporal.APIKeyFile, cfg.Temporal.APIKey = "", "key-two"
	c, err = DialTemporal(ctx, cfg, zap.NewNop())
	require.NoError(t, err)
	c.Close()
	require.Equal(t, "Bearer key-two", srv.lastAuth())
	cfg.Temporal.APIKey = "revoked-env-key-77"
	_, err = DialTemporal(ctx, cfg, zap.NewNop())
	require.ErrorContains(t, err, "the frontend refused the API key in "+config.APIKeyEnv)
	require.NotContains(t, err.Error(), "revoked-env-key-77", "the key is not in the error")
}

// The codec server's certificate (ServerTLS) is re-read when its files change, like the client's.
func TestServerCertificateReloadedWhenFilesChange(t *testing.T) {
	pki := testpki.New(t, "Server Reload Test CA")
	cert, key := pki.Leaf(t, "codec", "codec-v1", nil)
	tc, err := ServerTLS(cert, key, zap.NewNop())
	require.NoError(t, err)
	l, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	require.NoError(t, err)
	testnet.Serve(t, l, func(c net.Conn) { _ = c.(*tls.Conn).Handshake() })
	served := func() string {
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost"})
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	require.Equal(t, "codec-v1", served())
	pki.Leaf(t, "codec", "codec-v2", nil)
	require.Equal(t, "codec-v2", served())

	_, err = ServerTLS(cert, filepath.Join(t.TempDir(), "missing"), zap.NewNop())
	require.ErrorContains(t, err, "missing")
}
