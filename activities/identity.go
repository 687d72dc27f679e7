package activities

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"time"
)

// IdentityRecord is what a provisioned run issued to its host, as its search attributes hold it
// (IssuedKey, ExpiresKey, SignerKey): when, until when, and by which key. It holds nothing secret.
type IdentityRecord struct {
	Issued time.Time `json:"issued"`
	// Expires is the server JWT's exp or the certificate's NotAfter, the earlier when both
	Expires time.Time `json:"expires"`
	// Signer is the signing key's ID (activities.SignerKeyID) or, for a certificate, its CA's
	// fingerprint ("sha256:…") or, without the CA, its authority key ID ("aki:…")
	Signer string `json:"signer,omitempty"`
}

// IssuedIdentity is the record of what the configure step sent: the signed server JWT and the
// helper's certificate, read without verification (the run made or received them). nil when
// neither carries an expiry.
func IssuedIdentity(at time.Time, serverJWT, signer, certPEM, caPEM string) *IdentityRecord {
	var rec *IdentityRecord
	if exp, ok := JWTExpiry(serverJWT); ok {
		rec = &IdentityRecord{Issued: at.UTC(), Expires: exp.UTC(), Signer: signer}
	}
	cert := firstCertificate(certPEM)
	if cert == nil {
		return rec
	}
	if rec != nil && !cert.NotAfter.Before(rec.Expires) {
		return rec // the JWT lapses first: the record is the JWT's
	}
	return &IdentityRecord{Issued: at.UTC(), Expires: cert.NotAfter.UTC(), Signer: certSigner(cert, caPEM)}
}

// certSigner names the CA that issued cert: the fingerprint of the CA certificate given with it
// whose subject is cert's issuer, else cert's authority key ID.
func certSigner(cert *x509.Certificate, caPEM string) string {
	rest := []byte(caPEM)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		ca, err := x509.ParseCertificate(b.Bytes)
		if err == nil && string(ca.RawSubject) == string(cert.RawIssuer) {
			sum := sha256.Sum256(ca.Raw)
			return "sha256:" + hex.EncodeToString(sum[:])
		}
	}
	if len(cert.AuthorityKeyId) > 0 {
		return "aki:" + hex.EncodeToString(cert.AuthorityKeyId)
	}
	return ""
}

func firstCertificate(certPEM string) *x509.Certificate {
	b, _ := pem.Decode([]byte(certPEM))
	if b == nil {
		return nil
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil
	}
	return cert
}
