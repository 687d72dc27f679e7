package activities

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/testpki"
)

func signedJWT(t *testing.T, exp time.Time) string {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"exp": exp.Unix(), "sub": "n1.example"}).SignedString(key)
	require.NoError(t, err)
	return tok
}

func readFile(t *testing.T, f string) string {
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	return string(b)
}

// The record is the server JWT's, the certificate's when that lapses first, with the CA named
// by its fingerprint (or the certificate's authority key ID without it); nothing without either.
func TestIssuedIdentity(t *testing.T) {
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	jwtExp := at.Add(3 * time.Minute).Truncate(time.Second)
	tok := signedJWT(t, jwtExp)

	rec := IssuedIdentity(at, tok, "ed25519:abcd", "", "")
	require.Equal(t, &IdentityRecord{Issued: at, Expires: jwtExp, Signer: "ed25519:abcd"}, rec)
	require.Nil(t, IssuedIdentity(at, "", "", "", ""), "no JWT, no certificate: nothing issued to record")
	require.Nil(t, IssuedIdentity(at, "not.a.jwt", "", "garbage", ""))

	pki := testpki.New(t, "site CA")
	leafFile, _ := pki.Leaf(t, "n1", "n1.example", nil) // NotAfter in an hour
	cert, ca := readFile(t, leafFile), readFile(t, pki.CAFile)
	parsed := firstCertificate(cert)
	require.NotNil(t, parsed)
	sum := sha256.Sum256(pki.CA.Raw)

	rec = IssuedIdentity(at, "", "", cert, ca)
	require.Equal(t, parsed.NotAfter.UTC(), rec.Expires)
	require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), rec.Signer)

	require.Equal(t, jwtExp, IssuedIdentity(at, tok, "ed25519:abcd", cert, ca).Expires, "the JWT lapses first")
	late := signedJWT(t, parsed.NotAfter.Add(time.Hour))
	rec = IssuedIdentity(at, late, "ed25519:abcd", cert, ca)
	require.Equal(t, parsed.NotAfter.UTC(), rec.Expires, "the certificate lapses first")

	rec = IssuedIdentity(at, "", "", cert, "")
	if len(parsed.AuthorityKeyId) > 0 {
		require.Equal(t, "aki:"+hex.EncodeToString(parsed.AuthorityKeyId), rec.Signer)
	} else {
		require.Empty(t, rec.Signer)
	}
}
