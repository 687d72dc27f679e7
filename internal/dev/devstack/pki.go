package devstack

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Security modes of a local network.
const (
	ModeIssuer = "issuer" // Organization Issuer, ed25519 JWTs (the default)
	ModePKI    = "pki"    // a test x509 CA, provisioning JWT signed by an RSA key, protocol v1
)

// PKIFiles are the extra credentials of a pki-mode network.
type PKIFiles struct {
	CACert, CAKey                   string
	ProvisionerCert, ProvisionerKey string
	AdminCert, AdminKey             string
	SignerKey, SignerPublic         string // RSA key pair that signs provisioning JWTs
}

// CreatePKICredentials makes a pki-mode network's credentials in dir (once): a test CA, broker,
// provisioner and admin certificates signed by it, and a provisioning JWT (protocol v1, insecure
// provisioning as Choria does it) signed by an RSA signer whose public key the broker and
// jwt_verify_cert trust.
func CreatePKICredentials(dir string, brokerURL string) (*Credentials, error) {
	c := &Credentials{
		Dir:             dir,
		Mode:            ModePKI,
		BrokerCert:      filepath.Join(dir, "broker-cert.pem"),
		BrokerKey:       filepath.Join(dir, "broker-key.pem"),
		ProvisioningJWT: filepath.Join(dir, "provisioning.jwt"),
		PKI: &PKIFiles{
			CACert: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca-key.pem"),
			ProvisionerCert: filepath.Join(dir, "provisioner-cert.pem"), ProvisionerKey: filepath.Join(dir, "provisioner-key.pem"),
			AdminCert: filepath.Join(dir, "admin-cert.pem"), AdminKey: filepath.Join(dir, "admin-key.pem"),
			SignerKey: filepath.Join(dir, "signer-key.pem"), SignerPublic: filepath.Join(dir, "signer-public.pem"),
		},
	}
	secretsFile := filepath.Join(dir, "secrets")
	if _, err := os.Stat(c.ProvisioningJWT); err == nil {
		return c, c.loadSecrets(secretsFile)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c.Token, c.ProvisioningPassword = randomHex(16), randomHex(16)
	if err := os.WriteFile(secretsFile, []byte(c.Token+"\n"+c.ProvisioningPassword+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "issuer.public"), nil, 0o644); err != nil {
		return nil, err
	}

	ca, caKey, err := NewTestCA(c.PKI.CACert, c.PKI.CAKey)
	if err != nil {
		return nil, err
	}
	for _, leaf := range []struct{ cn, cert, key string }{
		{"broker.local", c.BrokerCert, c.BrokerKey},
		{ProvisionerCallerID, c.PKI.ProvisionerCert, c.PKI.ProvisionerKey},
		{"admin", c.PKI.AdminCert, c.PKI.AdminKey},
	} {
		// RSA: go-choria's file security provider signs requests with this key and knows only RSA
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		der, err := SignLeaf(ca, caKey, leaf.cn, &key.PublicKey)
		if err != nil {
			return nil, err
		}
		if err := writePEM(leaf.cert, "CERTIFICATE", der, 0o644); err != nil {
			return nil, err
		}
		if err := writePEM(leaf.key, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
			return nil, err
		}
	}

	signer, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writePEM(c.PKI.SignerKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(signer), 0o600); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&signer.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(c.PKI.SignerPublic, "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}
	return c, c.SetBrokerURL(brokerURL)
}

func readRSAKey(file string) (*rsa.PrivateKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM block", file)
	}
	return x509.ParsePKCS1PrivateKey(block.Bytes)
}

func writePEM(file, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// NewTestCA makes a self-signed ECDSA CA and writes it to certFile and keyFile.
func NewTestCA(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	return newNamedCA("Choria Provisioner Test CA", certFile, keyFile)
}

// SignLeaf issues a client and server certificate for cn (also its DNS name, plus localhost and
// 127.0.0.1 so the broker's certificate works on loopback).
func SignLeaf(ca *x509.Certificate, caKey any, cn string, pub any) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn, "localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", cn, err)
	}
	return der, nil
}
