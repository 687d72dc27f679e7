package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"time"
)

// APIKeyEnv may hold the Temporal API key (Temporal Cloud) instead of temporal.api_key_file. It is
// the koanf spelling of temporal.api_key, the only way that key may be set: a key written in the
// YAML file is refused, so it never sits in plain text in the file or its history.
const APIKeyEnv = "PROVISIONER_TEMPORAL__API_KEY"

// TLS is how the Temporal frontend is reached over TLS (temporal.tls). TLS is on when Enabled is
// set or any file or the server name is: a self-hosted cluster names its CA and a client
// certificate, Temporal Cloud with an API key needs only enabled (the system's CAs).
type TLS struct {
	Enabled bool `koanf:"enabled"`
	// CAFile holds the CAs (PEM) that sign the frontend's certificate; empty: the system's CAs.
	CAFile string `koanf:"ca_file"`
	// CertFile and KeyFile are the client certificate and key (PEM) for mutual TLS. They are read
	// again when either file changes, so a rotated certificate is used without a restart.
	CertFile string `koanf:"cert_file"`
	KeyFile  string `koanf:"key_file"`
	// ServerName is the name the frontend's certificate must carry; empty: the host of temporal.address.
	ServerName string `koanf:"server_name"`
	// InsecureSkipVerify accepts any frontend certificate (logged as a warning at every dial).
	InsecureSkipVerify bool `koanf:"insecure_skip_verify"`
}

// On says whether the frontend is dialled over TLS.
func (t TLS) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify
}

// Secret is a string that prints as [redacted] (fmt, JSON, zap's reflection), so a configuration
// logged whole does not carry it.
type Secret string

func (Secret) String() string               { return "[redacted]" }
func (Secret) Format(f fmt.State, _ rune)   { _, _ = f.Write([]byte("[redacted]")) }
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }
func (s Secret) Reveal() string             { return strings.TrimSpace(string(s)) }
func (s Secret) Empty() bool                { return s.Reveal() == "" }

// fileOnlyKeys may not be written in the YAML file (the environment may still set them).
var fileOnlyKeys = map[string]string{
	"temporal.api_key": "use temporal.api_key_file or " + APIKeyEnv,
}

// validateTemporalAuth checks temporal.tls and the API key: every file readable and what it
// should be, the certificate and key a pair, an API key only over TLS.
func (c *Config) validateTemporalAuth() error {
	t := c.Temporal.TLS
	if t.CAFile != "" {
		if _, err := ReadCAFile(t.CAFile); err != nil {
			return invalid("temporal.tls.ca_file", "%v", err)
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return invalid("temporal.tls.key_file", "required with temporal.tls.cert_file (the client certificate's private key)")
	case t.KeyFile != "" && t.CertFile == "":
		return invalid("temporal.tls.cert_file", "required with temporal.tls.key_file (the client certificate)")
	case t.CertFile != "":
		if _, err := LoadClientCertificate(t.CertFile, t.KeyFile, time.Now()); err != nil {
			return err
		}
	}

	key, file := c.Temporal.APIKey, c.Temporal.APIKeyFile
	if !key.Empty() && file != "" {
		return invalid("temporal.api_key_file", "set either it or %s, not both", APIKeyEnv)
	}
	if file != "" {
		if _, err := ReadAPIKeyFile(file); err != nil {
			return invalid("temporal.api_key_file", "%v", err)
		}
	}
	if key != "" && key.Empty() {
		return invalid("temporal.api_key", "%s is empty", APIKeyEnv)
	}
	if (!key.Empty() || file != "") && !t.On() {
		name := "temporal.api_key_file"
		if file == "" {
			name = "temporal.api_key"
		}
		return invalid(name, "an API key is only sent over TLS: set temporal.tls.enabled: true (and temporal.tls.ca_file unless the system's CAs sign the frontend's certificate)")
	}
	return nil
}

// ReadCAFile reads a PEM bundle of CA certificates; it must hold at least one.
func ReadCAFile(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	certs, err := parseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("a CERTIFICATE block does not parse: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("holds no PEM certificate")
	}
	return certs, nil
}

// LoadClientCertificate reads a client certificate and its key and checks them: they are a
// pair, the certificate is valid at now and may authenticate a client. The error names the key
// (temporal.tls.cert_file or temporal.tls.key_file) whose file is at fault.
func LoadClientCertificate(certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, invalid("temporal.tls.cert_file", "%v", err)
	}
	certs, err := parseCertificates(certPEM)
	if err != nil {
		return nil, invalid("temporal.tls.cert_file", "%s: %v", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, invalid("temporal.tls.key_file", "%v", err)
	}
	if err := CheckKeyFile(keyFile); err != nil {
		return nil, invalid("temporal.tls.key_file", "%v", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, invalid("temporal.tls.key_file", "%s does not match the certificate in temporal.tls.cert_file %s (%s)", keyFile, certFile, Describe(certs[0]))
		}
		return nil, invalid("temporal.tls.key_file", "%s: %v", keyFile, err)
	}
	leaf := certs[0]
	if now.After(leaf.NotAfter) {
		return nil, invalid("temporal.tls.cert_file", "%s (%s) expired at %s", certFile, Describe(leaf), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return nil, invalid("temporal.tls.cert_file", "%s (%s) is not valid before %s", certFile, Describe(leaf), leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if !clientUsage(leaf) {
		return nil, invalid("temporal.tls.cert_file", "%s (%s) is not for client authentication (its extended key usage lacks clientAuth)", certFile, Describe(leaf))
	}
	pair.Leaf = leaf
	return &pair, nil
}

func clientUsage(c *x509.Certificate) bool {
	if len(c.ExtKeyUsage) == 0 {
		return true
	}
	for _, u := range c.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

// Describe names a certificate for error messages: its subject and issuer.
func Describe(c *x509.Certificate) string {
	return fmt.Sprintf("subject %q, issuer %q", c.Subject.String(), c.Issuer.String())
}

// ReadAPIKeyFile reads an API key: the file's content without surrounding white space. A file
// others may read is refused (CheckKeyFile).
func ReadAPIKeyFile(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	if err := CheckKeyFile(file); err != nil {
		return "", err
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("%s is empty", file)
	}
	if strings.ContainsAny(key, " \t\r\n") {
		return "", fmt.Errorf("%s holds more than one word (an API key is one line)", file)
	}
	return key, nil
}
