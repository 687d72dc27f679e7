package activities

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"regexp"

	"github.com/choria-io/go-choria/choria"
)

// ValidateCSR checks a server's CSR as the Choria Provisioner does: it parses, its common name is
// the identity, and neither its common name nor its DNS names match denyList.
func ValidateCSR(csrPEM string, identity string, denyList []*regexp.Regexp) error {
	block, _ := pem.Decode([]byte(csrPEM))
	if block == nil {
		return fmt.Errorf("%w: no PEM block", ErrCSRInvalid)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCSRInvalid, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return fmt.Errorf("%w: signature: %v", ErrCSRInvalid, err)
	}
	if csr.Subject.CommonName != identity {
		return fmt.Errorf("%w: common name %q, identity %q", ErrCSRMismatch, csr.Subject.CommonName, identity)
	}
	for _, name := range append([]string{csr.Subject.CommonName}, csr.DNSNames...) {
		for _, re := range denyList {
			if re.MatchString(name) {
				return fmt.Errorf("%w: %q matches %q", ErrCSRDenied, name, re)
			}
		}
	}
	return nil
}

// EncryptKeyForServer encrypts a helper-supplied private key for transport the way go-choria's
// provision agent decrypts it: AES-256 PEM encryption with the ECDH shared secret of a fresh
// provisioner key pair and the server's ecdh_public (from the jwt step). It returns the encrypted
// PEM and the provisioner's public key (hex) to send as ecdh_public.
func EncryptKeyForServer(keyPEM string, serverECDHPublic string) (string, string, error) {
	if serverECDHPublic == "" {
		return "", "", ErrNoECDH
	}
	block, _ := pem.Decode([]byte(keyPEM))
	if block == nil {
		return "", "", ErrBadKey
	}
	serverPub, err := hex.DecodeString(serverECDHPublic)
	if err != nil {
		return "", "", fmt.Errorf("server ecdh_public is not hex: %w", err)
	}
	pri, pub, err := choria.ECDHKeyPair()
	if err != nil {
		return "", "", err
	}
	secret, err := choria.ECDHSharedSecret(pri, serverPub)
	if err != nil {
		return "", "", err
	}
	//lint:ignore SA1019 go-choria's agent decrypts with x509.DecryptPEMBlock; this is its counterpart
	enc, err := x509.EncryptPEMBlock(rand.Reader, "RSA PRIVATE KEY", block.Bytes, secret, x509.PEMCipherAES256) //nolint:staticcheck
	if err != nil {
		return "", "", err
	}
	var out bytes.Buffer
	if err := pem.Encode(&out, enc); err != nil {
		return "", "", err
	}
	return out.String(), hex.EncodeToString(pub), nil
}
