package devstack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/choria-temporal/provisioner/config"
)

// Names in the test certificates of a Temporal cluster with mutual TLS. Each certificate also
// names localhost and 127.0.0.1 (SignLeaf), so a client may dial 127.0.0.1 without server_name.
const (
	TemporalFrontendName  = "frontend.temporal.test"
	TemporalInternodeName = "internode.temporal.test"
	CodecServerName       = "codec.temporal.test"
)

// TemporalTLS is the test PKI of a Temporal cluster with mutual TLS, made at test time: one CA
// signs the frontend's and the internode certificate, the system worker's client certificate and
// the provisioner's; another CA, which nobody trusts, signs a client certificate that must be
// refused. The codec server's HTTPS certificate comes from the same CA.
type TemporalTLS struct {
	Dir                         string
	CACert, CAKey               string
	FrontendCert, FrontendKey   string // the frontend's server certificate (TemporalFrontendName)
	InternodeCert, InternodeKey string // history, matching, frontend and worker among themselves, both ways
	WorkerCert, WorkerKey       string // Temporal's system worker, a client of the frontend
	ClientCert, ClientKey       string // the provisioner and the operator commands
	CodecCert, CodecKey         string // the codec server's HTTPS (CodecServerName)
	OtherCACert, OtherCAKey     string
	OtherClientCert             string // signed by the other CA
	OtherClientKey              string
}

// CreateTemporalTLS makes the certificates in dir.
func CreateTemporalTLS(dir string) (*TemporalTLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	t := &TemporalTLS{
		Dir: dir, CACert: f("ca.pem"), CAKey: f("ca-key.pem"),
		FrontendCert: f("frontend.pem"), FrontendKey: f("frontend-key.pem"),
		InternodeCert: f("internode.pem"), InternodeKey: f("internode-key.pem"),
		WorkerCert: f("worker.pem"), WorkerKey: f("worker-key.pem"),
		ClientCert: f("client.pem"), ClientKey: f("client-key.pem"),
		CodecCert: f("codec.pem"), CodecKey: f("codec-key.pem"),
		OtherCACert: f("other-ca.pem"), OtherCAKey: f("other-ca-key.pem"),
		OtherClientCert: f("other-client.pem"), OtherClientKey: f("other-client-key.pem"),
	}
	ca, caKey, err := newNamedCA("Temporal Test CA", t.CACert, t.CAKey)
	if err != nil {
		return nil, err
	}
	other, otherKey, err := newNamedCA("Untrusted Test CA", t.OtherCACert, t.OtherCAKey)
	if err != nil {
		return nil, err
	}
	for _, leaf := range []struct {
		ca        *x509.Certificate
		caKey     any
		cn        string
		cert, key string
	}{
		{ca, caKey, TemporalFrontendName, t.FrontendCert, t.FrontendKey},
		{ca, caKey, TemporalInternodeName, t.InternodeCert, t.InternodeKey},
		{ca, caKey, "temporal-system-worker", t.WorkerCert, t.WorkerKey},
		{ca, caKey, "choria-provisioner", t.ClientCert, t.ClientKey},
		{ca, caKey, CodecServerName, t.CodecCert, t.CodecKey},
		{other, otherKey, "choria-provisioner", t.OtherClientCert, t.OtherClientKey},
	} {
		if err := writeLeaf(leaf.ca, leaf.caKey, leaf.cn, leaf.cert, leaf.key); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Client is the provisioner's temporal.tls for this cluster.
func (t *TemporalTLS) Client() config.TLS {
	return config.TLS{CAFile: t.CACert, CertFile: t.ClientCert, KeyFile: t.ClientKey, ServerName: TemporalFrontendName}
}

// ServerConfig is the global.tls section of the Temporal server's configuration: the frontend
// and the internode connections both require a client certificate from the CA.
func (t *TemporalTLS) ServerConfig() string {
	return fmt.Sprintf(`  tls:
    refreshInterval: 1m
    internode:
      server:
        certFile: %[1]q
        keyFile: %[2]q
        requireClientAuth: true
        clientCaFiles: [%[3]q]
      client:
        serverName: %[4]s
        rootCaFiles: [%[3]q]
    frontend:
      server:
        certFile: %[5]q
        keyFile: %[6]q
        requireClientAuth: true
        clientCaFiles: [%[3]q]
    systemWorker:
      certFile: %[7]q
      keyFile: %[8]q
      client:
        serverName: %[9]s
        rootCaFiles: [%[3]q]
`, t.InternodeCert, t.InternodeKey, t.CACert, TemporalInternodeName, t.FrontendCert, t.FrontendKey,
		t.WorkerCert, t.WorkerKey, TemporalFrontendName)
}

// WriteClientCertificate (re)writes the provisioner's client certificate and key with a new key
// pair signed by the CA (certificate rotation).
func (t *TemporalTLS) WriteClientCertificate(cn string) error {
	ca, caKey, err := loadCA(t.CACert, t.CAKey)
	if err != nil {
		return err
	}
	return writeLeaf(ca, caKey, cn, t.ClientCert, t.ClientKey)
}

func writeLeaf(ca *x509.Certificate, caKey any, cn, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := SignLeaf(ca, caKey, cn, &key.PublicKey)
	if err != nil {
		return err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// the key first: a reader that sees the new certificate finds its key already there
	if err := writePEM(keyFile+".new", "PRIVATE KEY", kd, 0o600); err != nil {
		return err
	}
	if err := writePEM(certFile+".new", "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	if err := os.Rename(keyFile+".new", keyFile); err != nil {
		return err
	}
	return os.Rename(certFile+".new", certFile)
}

func newNamedCA(cn, certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	return ca, key, writePEM(keyFile, "PRIVATE KEY", kd, 0o600)
}

func loadCA(certFile, keyFile string) (*x509.Certificate, any, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	return ca, pair.PrivateKey, nil
}
