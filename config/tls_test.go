package config

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/testpki"
)

func newTestPKI(t *testing.T) *testpki.PKI { return testpki.New(t, "Config Test CA") }

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(f, []byte(content), 0o600))
	return f
}

// tlsConfig is a config file whose temporal section carries extra (indented under temporal:).
func tlsConfig(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	helper := writeFile(t, dir, "helper.sh", "#!/bin/sh\n")
	require.NoError(t, os.Chmod(helper, 0o755))
	key := writeFile(t, dir, "codec.key", "00\n")
	return writeFile(t, dir, "provisioner.yaml", fmt.Sprintf("helper: %s\ntemporal:\n  codec_key_file: %s\n%s", helper, key, extra))
}

func TestTLSKeysLoad(t *testing.T) {
	p := newTestPKI(t)
	cert, key := p.Leaf(t, "client", "client", nil)
	apiKey := writeFile(t, p.Dir, "api.key", "  secret-api-key\n")
	cfg, err := Load(tlsConfig(t, fmt.Sprintf(`  tls:
    ca_file: %s
    cert_file: %s
    key_file: %s
    server_name: frontend.example.net
  api_key_file: %s
`, p.CAFile, cert, key, apiKey)))
	require.NoError(t, err)
	require.True(t, cfg.Temporal.TLS.On())
	require.Equal(t, TLS{CAFile: p.CAFile, CertFile: cert, KeyFile: key, ServerName: "frontend.example.net"}, cfg.Temporal.TLS)
	require.Equal(t, apiKey, cfg.Temporal.APIKeyFile)

	// the client key and the API key: refused when others can read them (CheckKeyFile)
	for k, f := range map[string]string{"temporal.tls.key_file": key, "temporal.api_key_file": apiKey} {
		require.NoError(t, os.Chmod(f, 0o644))
		_, err = Load(tlsConfig(t, fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n  api_key_file: %s\n", cert, key, apiKey)))
		require.ErrorContains(t, err, k+": "+f+" is readable by others", k)
		require.ErrorContains(t, err, "chmod 600 "+f, k)
		require.NoError(t, os.Chmod(f, 0o600))
	}

	// no tls keys: TLS is off; enabled alone turns it on (the system's CAs)
	cfg, err = Load(tlsConfig(t, ""))
	require.NoError(t, err)
	require.False(t, cfg.Temporal.TLS.On())
	cfg, err = Load(tlsConfig(t, "  tls: {enabled: true}\n"))
	require.NoError(t, err)
	require.True(t, cfg.Temporal.TLS.On())
	for _, on := range []TLS{{CAFile: "x"}, {CertFile: "x"}, {KeyFile: "x"}, {ServerName: "x"}, {InsecureSkipVerify: true}} {
		require.True(t, on.On(), "%+v", on)
	}
}

func TestTLSValidationNamesTheKey(t *testing.T) {
	p := newTestPKI(t)
	cert, key := p.Leaf(t, "client", "client", nil)
	_, otherKey := p.Leaf(t, "other", "other", nil)
	expired, expiredKey := p.Leaf(t, "expired", "expired", func(c *x509.Certificate) { c.NotAfter = time.Now().Add(-time.Minute) })
	future, futureKey := p.Leaf(t, "future", "future", func(c *x509.Certificate) { c.NotBefore = time.Now().Add(time.Hour) })
	server, serverKey := p.Leaf(t, "server-only", "server-only", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} })
	notPEM := writeFile(t, p.Dir, "not.pem", "hello\n")
	empty := writeFile(t, p.Dir, "empty.key", "\n  \n")
	twoWords := writeFile(t, p.Dir, "two.key", "one two\n")
	apiKey := writeFile(t, p.Dir, "api.key", "k\n")
	missing := filepath.Join(p.Dir, "missing.pem")

	cases := []struct {
		name, yaml, key, want string
	}{
		{"unreadable CA", "  tls: {ca_file: " + missing + "}\n", "temporal.tls.ca_file", "no such file"},
		{"CA file without a certificate", "  tls: {ca_file: " + notPEM + "}\n", "temporal.tls.ca_file", "holds no PEM certificate"},
		{"a key file for a CA", "  tls: {ca_file: " + key + "}\n", "temporal.tls.ca_file", "holds no PEM certificate"},
		{"certificate without key", "  tls: {cert_file: " + cert + "}\n", "temporal.tls.key_file", "required with temporal.tls.cert_file"},
		{"key without certificate", "  tls: {key_file: " + key + "}\n", "temporal.tls.cert_file", "required with temporal.tls.key_file"},
		{"unreadable certificate", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", missing, key), "temporal.tls.cert_file", "no such file"},
		{"certificate not PEM", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", notPEM, key), "temporal.tls.cert_file", "holds no PEM certificate"},
		{"unreadable key", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", cert, missing), "temporal.tls.key_file", "no such file"},
		{"key not PEM", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", cert, notPEM), "temporal.tls.key_file", notPEM},
		{"certificate and key that do not match", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", cert, otherKey), "temporal.tls.key_file",
			"does not match the certificate in temporal.tls.cert_file " + cert + ` (subject "CN=client", issuer "CN=Config Test CA")`},
		{"expired certificate", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", expired, expiredKey), "temporal.tls.cert_file", "expired at"},
		{"certificate not yet valid", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", future, futureKey), "temporal.tls.cert_file", "is not valid before"},
		{"server-only certificate", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", server, serverKey), "temporal.tls.cert_file", "not for client authentication"},
		{"API key inline in YAML", "  tls: {enabled: true}\n  api_key: s3cret\n", "temporal.api_key", "must not be written in"},
		{"unreadable API key file", "  tls: {enabled: true}\n  api_key_file: " + missing + "\n", "temporal.api_key_file", "no such file"},
		{"empty API key file", "  tls: {enabled: true}\n  api_key_file: " + empty + "\n", "temporal.api_key_file", "is empty"},
		{"API key file of two words", "  tls: {enabled: true}\n  api_key_file: " + twoWords + "\n", "temporal.api_key_file", "more than one word"},
		{"API key without TLS", "  api_key_file: " + apiKey + "\n", "temporal.api_key_file", "an API key is only sent over TLS"},
	}
	for _, c := range cases {
		_, err := Load(tlsConfig(t, c.yaml))
		require.Error(t, err, c.name)
		require.True(t, errors.Is(err, ErrInvalid), "%s: %v", c.name, err)
		require.Contains(t, err.Error(), c.key+":", c.name)
		require.Contains(t, err.Error(), c.want, c.name)
		// the operator commands validate the temporal section the same way
		_, err = LoadForOperator(tlsConfig(t, c.yaml))
		require.ErrorContains(t, err, c.key+":", c.name)
	}
}

func TestTLSEnvironmentOverrides(t *testing.T) {
	p := newTestPKI(t)
	cert, key := p.Leaf(t, "client", "client", nil)
	t.Setenv("PROVISIONER_TEMPORAL__TLS__CA_FILE", p.CAFile)
	t.Setenv("PROVISIONER_TEMPORAL__TLS__CERT_FILE", cert)
	t.Setenv("PROVISIONER_TEMPORAL__TLS__KEY_FILE", key)
	t.Setenv("PROVISIONER_TEMPORAL__TLS__SERVER_NAME", "env.example.net")
	t.Setenv("PROVISIONER_TEMPORAL__TLS__INSECURE_SKIP_VERIFY", "true")
	t.Setenv(APIKeyEnv, "env-api-key")
	cfg, err := Load(tlsConfig(t, "  tls: {server_name: file.example.net}\n"))
	require.NoError(t, err)
	require.Equal(t, TLS{CAFile: p.CAFile, CertFile: cert, KeyFile: key, ServerName: "env.example.net", InsecureSkipVerify: true}, cfg.Temporal.TLS)
	require.Equal(t, "env-api-key", cfg.Temporal.APIKey.Reveal())

	// an empty variable clears a key the file set
	t.Setenv("PROVISIONER_TEMPORAL__TLS__CERT_FILE", "")
	t.Setenv("PROVISIONER_TEMPORAL__TLS__KEY_FILE", "")
	cfg, err = Load(tlsConfig(t, fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", cert, key)))
	require.NoError(t, err)
	require.Empty(t, cfg.Temporal.TLS.CertFile)

	// the environment's key alone, without TLS, is refused like the file's
	for _, v := range []string{"CA_FILE", "SERVER_NAME", "INSECURE_SKIP_VERIFY"} {
		t.Setenv("PROVISIONER_TEMPORAL__TLS__"+v, "")
	}
	_, err = Load(tlsConfig(t, ""))
	require.ErrorContains(t, err, "temporal.api_key: an API key is only sent over TLS")
	// not both sources
	_, err = Load(tlsConfig(t, "  tls: {enabled: true}\n  api_key_file: "+writeFile(t, p.Dir, "k", "k")+"\n"))
	require.ErrorContains(t, err, "temporal.api_key_file: set either it or "+APIKeyEnv)
	t.Setenv(APIKeyEnv, "  ")
	_, err = Load(tlsConfig(t, "  tls: {enabled: true}\n"))
	require.ErrorContains(t, err, "temporal.api_key: "+APIKeyEnv+" is empty")
}

// The API key never prints: not with fmt, not as JSON, not inside the whole configuration.
func TestAPIKeyIsRedacted(t *testing.T) {
	t.Setenv(APIKeyEnv, "very-secret-api-key")
	cfg, err := Load(tlsConfig(t, "  tls: {enabled: true}\n"))
	require.NoError(t, err)
	js, err := json.Marshal(cfg)
	require.NoError(t, err)
	for _, s := range []string{fmt.Sprint(cfg.Temporal.APIKey), fmt.Sprintf("%v %+v %#v %s %q", cfg, cfg, cfg, cfg.Temporal.APIKey, cfg.Temporal.APIKey), string(js)} {
		require.NotContains(t, s, "very-secret-api-key")
	}
	require.True(t, strings.Contains(string(js), `"[redacted]"`), string(js))
	require.Equal(t, "very-secret-api-key", cfg.Temporal.APIKey.Reveal())
}
