// Package testpki makes a CA and certificates as PEM files for unit tests (config, service).
// Tests only: nothing in a binary imports it.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA in a temporary directory.
type PKI struct {
	Dir    string
	CA     *x509.Certificate
	CAFile string
	key    *ecdsa.PrivateKey
}

// New makes a CA named cn with its certificate in CAFile.
func New(t testing.TB, cn string) *PKI {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	ca, err := x509.ParseCertificate(der)
	must(t, err)
	p := &PKI{Dir: dir, CA: ca, CAFile: filepath.Join(dir, "ca.pem"), key: key}
	WritePEM(t, p.CAFile, "CERTIFICATE", der)
	return p
}

// Pool is a pool holding the CA.
func (p *PKI) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.CA)
	return pool
}

// Leaf writes a client and server certificate for cn (also valid for localhost and 127.0.0.1)
// and its key as name.pem and name-key.pem; mod adjusts the template.
func (p *PKI) Leaf(t testing.TB, name, cn string, mod func(*x509.Certificate)) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn, "localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	if mod != nil {
		mod(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA, &key.PublicKey, p.key)
	must(t, err)
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	certFile, keyFile = filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
	WritePEM(t, keyFile, "PRIVATE KEY", kd)
	WritePEM(t, certFile, "CERTIFICATE", der)
	return certFile, keyFile
}

// WritePEM writes one PEM block to file, through a rename so a reader never sees half of it.
func WritePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	must(t, os.WriteFile(file+".tmp", pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	must(t, os.Rename(file+".tmp", file))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
