package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/config"
)

// DialTemporal connects to the configured Temporal frontend, over TLS and with the API key when
// the configuration says so. Every command that talks to Temporal dials here. A refused
// connection's error says what is wrong in the configuration's terms: which key, file or
// server name.
func DialTemporal(ctx context.Context, cfg *config.Config, log *zap.Logger) (client.Client, error) {
	return dialTemporal(ctx, cfg, log, nil, nil)
}

// DialTemporalWith is DialTemporal with more gRPC dial options (the operator CLI's request
// counter).
func DialTemporalWith(ctx context.Context, cfg *config.Config, log *zap.Logger, dial ...grpc.DialOption) (client.Client, error) {
	return dialTemporal(ctx, cfg, log, nil, nil, dial...)
}

// dialTemporal is DialTemporal reporting the SDK's metrics through mh (nil: none), with the
// data converter dc (nil: the operators' one, DataConverter).
func dialTemporal(ctx context.Context, cfg *config.Config, log *zap.Logger, mh client.MetricsHandler, dc converter.DataConverter, dial ...grpc.DialOption) (client.Client, error) {
	opts, err := ClientOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, dial...)
	if dc != nil {
		opts.DataConverter, opts.FailureConverter = dc, failureConverter(cfg, dc)
	}
	opts.MetricsHandler = mh
	began := time.Now()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, ExplainDialError(cfg, err, probeTLS(ctx, cfg.Temporal.Address, opts.ConnectionOptions.TLS))
	}
	log.Debug("connected to Temporal", zap.String("address", cfg.Temporal.Address), zap.String("namespace", cfg.Temporal.Namespace),
		zap.Bool("tls", opts.ConnectionOptions.TLS != nil), zap.Duration("took", time.Since(began)))
	return c, nil
}

// ClientOptions are the Temporal client options of the configuration: address, namespace,
// payload codec (the operators' one: it reads every payload of the codec's keys), TLS and
// credentials.
func ClientOptions(cfg *config.Config, log *zap.Logger) (client.Options, error) {
	dc, _, err := DataConverter(cfg)
	if err != nil {
		return client.Options{}, err
	}
	opts := client.Options{
		HostPort:         cfg.Temporal.Address,
		Namespace:        cfg.Temporal.Namespace,
		Logger:           logging.NewTemporal(log.Named("temporal")),
		DataConverter:    dc,
		FailureConverter: failureConverter(cfg, dc),
		// No payload is stored outside Temporal, but the SDK still visits every task's and
		// request's payloads for it, with up to 8 goroutines per message by default: each new
		// goroutine grew its stack through the visitor's deep recursion (runtime.newstack and
		// copystack, 13 % of the provisioner's CPU in a 500-host burst). One visits in place.
		ExternalStorage: converter.ExternalStorage{Concurrency: converter.ExternalStorageConcurrency{MaxOperationsPerMessage: 1}},
	}
	// gzip is the SDK's default; our payloads are encrypted (incompressible), and compressing
	// the rest cost ~13 % of the provisioner's CPU in a burst (docs/performance.md)
	opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	if cfg.Temporal.GRPCCompression == "gzip" {
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionGzip{}
	}
	if opts.ConnectionOptions.TLS, err = TemporalTLS(cfg.Temporal.TLS, log); err != nil {
		return client.Options{}, err
	}
	switch {
	case cfg.Temporal.APIKeyFile != "":
		opts.Credentials = client.NewAPIKeyDynamicCredentials(newFileKey(cfg.Temporal.APIKeyFile).get)
	case !cfg.Temporal.APIKey.Empty():
		opts.Credentials = client.NewAPIKeyStaticCredentials(cfg.Temporal.APIKey.Reveal())
	}
	return opts, nil
}

// TemporalTLS is the client TLS configuration of temporal.tls, nil when TLS is off. The client
// certificate is read again at a handshake after its files changed (GetClientCertificate), so a
// rotated certificate is used from the next connection on without a restart; the CA file is read
// once (put a new CA in the bundle next to the old one before the frontend switches to it).
func TemporalTLS(t config.TLS, log *zap.Logger) (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.InsecureSkipVerify {
		log.Warn("temporal.tls.insecure_skip_verify is set: the Temporal frontend's certificate is not verified, anyone between here and it can read and change everything, API key included")
	}
	if t.CAFile != "" {
		pool, err := config.ReadCAFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: temporal.tls.ca_file: %v", config.ErrInvalid, err)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		r := &certReloader{certFile: t.CertFile, keyFile: t.KeyFile, log: log, what: "Temporal client certificate",
			load: func(cert, key string) (*tls.Certificate, error) {
				return config.LoadClientCertificate(cert, key, time.Now())
			}}
		if _, err := r.current(); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.current() }
	}
	return tc, nil
}

// fileStamp tells a changed file: rotation tools rename a new file into place or rewrite it.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(file string) (fileStamp, error) {
	st, err := os.Stat(file)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: st.ModTime(), size: st.Size(), ino: inode(st)}, nil
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

// ServerTLS is a server's TLS configuration with the certificate and key in certFile and
// keyFile, read again at a handshake after either changed (the codec server's HTTPS).
func ServerTLS(certFile, keyFile string, log *zap.Logger) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log, what: "server certificate", load: loadServerCertificate}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.current() }}, nil
}

func loadServerCertificate(certFile, keyFile string) (*tls.Certificate, error) {
	if err := config.CheckKeyFile(keyFile); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &pair, nil
}

// certReloader holds a certificate and reads its files again when either changed.
type certReloader struct {
	certFile, keyFile string
	log               *zap.Logger
	what              string
	load              func(certFile, keyFile string) (*tls.Certificate, error)

	mu        sync.Mutex
	cert      *tls.Certificate
	stamps    [2]fileStamp
	badStamps [2]fileStamp // the last pair that failed to load, logged once
}

func (r *certReloader) current() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, cerr := stampOf(r.certFile)
	ks, kerr := stampOf(r.keyFile)
	stamps := [2]fileStamp{cs, ks}
	if r.cert != nil && (cerr != nil || kerr != nil || stamps == r.stamps || stamps == r.badStamps) {
		return r.cert, nil // unchanged, or a change that does not load: keep the pair that works
	}
	cert, err := r.load(r.certFile, r.keyFile)
	if err != nil {
		if r.cert == nil {
			return nil, err
		}
		r.badStamps = stamps
		r.log.Warn("the changed "+r.what+" does not load; still using the previous one", zap.Error(err))
		return r.cert, nil
	}
	if r.cert != nil {
		fields := []zap.Field{zap.String("file", r.certFile)}
		if cert.Leaf != nil {
			fields = append(fields, zap.String("subject", cert.Leaf.Subject.String()), zap.Time("not_after", cert.Leaf.NotAfter))
		}
		r.log.Info(r.what+" reloaded", fields...)
	}
	r.cert, r.stamps = cert, stamps
	return cert, nil
}

// fileKey is an API key read from a file, read again when the file changes.
type fileKey struct {
	file  string
	mu    sync.Mutex
	key   string
	stamp fileStamp
}

func newFileKey(file string) *fileKey { return &fileKey{file: file} }

func (f *fileKey) get(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := stampOf(f.file)
	if err == nil && st == f.stamp && f.key != "" {
		return f.key, nil
	}
	key, err := config.ReadAPIKeyFile(f.file)
	if err != nil {
		if f.key != "" {
			return f.key, nil // mid-rotation: the previous key until the new file reads
		}
		return "", fmt.Errorf("temporal.api_key_file: %w", err)
	}
	f.key, f.stamp = key, st
	return key, nil
}

// probeTLS finds out, after a failed dial, what the gRPC error may hide: a server that refuses
// the client certificate does so after the client's side of a TLS 1.3 handshake is done, and
// the client sees only a closed connection if it was writing. It handshakes with the client's
// configuration (without one: only to learn whether the server speaks TLS) and reads the
// server's first frame; a refusal arrives as the server's alert. nil: nothing learnt.
func probeTLS(ctx context.Context, address string, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", address)
	if err != nil {
		return nil
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	plaintext := tc == nil
	if plaintext {
		tc = &tls.Config{InsecureSkipVerify: true} // only to see whether a TLS server answers
	} else {
		tc = tc.Clone()
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(address)
		}
	}
	tc.NextProtos = []string{"h2"}
	conn := tls.Client(raw, tc)
	if err := conn.HandshakeContext(ctx); err != nil {
		if plaintext {
			return nil
		}
		return fmt.Errorf("TLS probe: %w", err)
	}
	if plaintext {
		return errSpeaksTLS
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("TLS probe: %w", err)
	}
	return nil
}

var errSpeaksTLS = errors.New("the frontend answers a TLS handshake")

var validForRe = regexp.MustCompile(`certificate is valid for (.+?), not ([^\s"\\]+)`)

// ExplainDialError says in the configuration's terms why a dial failed, ahead of the SDK's
// error: the frontend needs a client certificate, refused ours (which file, whose), does not
// carry the server name we check (which name, what it is valid for), is signed by a CA we do
// not trust (which file), does not speak TLS, or refused the API key.
func ExplainDialError(cfg *config.Config, err, probe error) error {
	t := cfg.Temporal.TLS
	msg := err.Error()
	if probe != nil {
		msg += " " + probe.Error()
	}
	serverName := t.ServerName
	nameFrom := "temporal.tls.server_name"
	if serverName == "" {
		serverName, _, _ = net.SplitHostPort(cfg.Temporal.Address)
		nameFrom = "the host of temporal.address; set temporal.tls.server_name to one of those names"
	}
	caFrom := "the system's CAs (no temporal.tls.ca_file)"
	if t.CAFile != "" {
		caFrom = "temporal.tls.ca_file " + t.CAFile
	}
	var why string
	has := func(s ...string) bool { return containsAny(msg, s...) }
	var hostErr x509.HostnameError
	var authErr x509.UnknownAuthorityError
	switch {
	case errors.Is(probe, errSpeaksTLS):
		why = "the frontend speaks TLS, and temporal.tls is not set: set temporal.tls.ca_file (and cert_file and key_file for mutual TLS)"
	case !t.On() && has("server preface", "connection reset", "EOF", "broken pipe", "http2: frame too large"):
		why = "the connection closed before Temporal answered: if the frontend requires TLS, set temporal.tls (ca_file, cert_file, key_file)"
	case has("first record does not look like a TLS handshake"):
		why = "the frontend does not speak TLS at " + cfg.Temporal.Address + ": remove temporal.tls, or check temporal.address"
	case errors.As(err, &hostErr) || has("certificate is valid for", "doesn't contain any IP SANs", "not valid for any names"):
		valid := ""
		if m := validForRe.FindStringSubmatch(msg); m != nil {
			valid = ", it is valid for " + m[1]
		}
		why = fmt.Sprintf("the frontend's certificate does not carry the server name %q (%s)%s", serverName, nameFrom, valid)
	case errors.As(err, &authErr) || has("certificate signed by unknown authority"):
		why = "the frontend's certificate is not signed by a CA in " + caFrom
	case has("certificate has expired or is not yet valid") && !has("remote error"):
		why = "the frontend's certificate has expired or is not yet valid (or this machine's clock is wrong)"
	case has("certificate required") || (t.CertFile == "" && has("bad certificate", "unknown certificate authority", "handshake failure")):
		why = "the frontend requires a client certificate (mutual TLS): set temporal.tls.cert_file and temporal.tls.key_file"
	case has("bad certificate", "unknown certificate authority", "certificate unknown", "expired certificate", "unsupported certificate", "access denied", "handshake failure"):
		why = clientCertRefused(t, has)
	case has("Unauthenticated", "PermissionDenied", "Request unauthorized", "invalid API key", "unauthorized"):
		why = apiKeyRefused(cfg)
	}
	if probe != nil && !errors.Is(probe, errSpeaksTLS) {
		err = fmt.Errorf("%w (%v)", err, probe)
	}
	if why == "" {
		return fmt.Errorf("connecting to Temporal at %s: %w", cfg.Temporal.Address, err)
	}
	return fmt.Errorf("connecting to Temporal at %s: %s: %w", cfg.Temporal.Address, why, err)
}

func containsAny(msg string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(msg, x) {
			return true
		}
	}
	return false
}

// clientCertRefused says why the frontend refused the client certificate, naming it.
func clientCertRefused(t config.TLS, has func(...string) bool) string {
	cert := "the client certificate in temporal.tls.cert_file " + t.CertFile
	if c, lerr := config.LoadClientCertificate(t.CertFile, t.KeyFile, time.Now()); lerr == nil {
		cert += " (" + config.Describe(c.Leaf) + ")"
	}
	switch {
	case has("unknown certificate authority"):
		return "the frontend does not trust the CA that signed " + cert
	case has("expired certificate"):
		return "the frontend says " + cert + " has expired"
	}
	return "the frontend refused " + cert + ": not signed by a CA it trusts for clients, expired, or not for client authentication"
}

// apiKeyRefused says which API key the frontend refused, or that it wants one.
func apiKeyRefused(cfg *config.Config) string {
	switch {
	case cfg.Temporal.APIKeyFile != "":
		return "the frontend refused the API key in temporal.api_key_file " + cfg.Temporal.APIKeyFile + " (expired, revoked, or without access to namespace " + cfg.Temporal.Namespace + ")"
	case !cfg.Temporal.APIKey.Empty():
		return "the frontend refused the API key in " + config.APIKeyEnv + " (expired, revoked, or without access to namespace " + cfg.Temporal.Namespace + ")"
	}
	return "the frontend refused the connection as unauthenticated: it may want an API key (temporal.api_key_file) or a client certificate"
}
