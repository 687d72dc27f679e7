package activities

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

func provisioningJWT(t *testing.T, key any) string {
	t.Helper()
	claims, err := tokens.NewProvisioningClaims(true, true, "s3cret", "", "", []string{"nats://127.0.0.1:4222"}, "", "", "", "choria", "", time.Hour)
	require.NoError(t, err)
	signed, err := tokens.SignToken(claims, key)
	require.NoError(t, err)
	return signed
}

func TestVerifyProvisioningJWTWithEd25519Issuer(t *testing.T) {
	pub, pri, _ := ed25519.GenerateKey(rand.Reader)
	raw := provisioningJWT(t, pri)
	claims, err := VerifyProvisioningJWT(raw, hex.EncodeToString(pub))
	require.NoError(t, err)
	require.Equal(t, "s3cret", claims.Token)

	other, _, _ := ed25519.GenerateKey(rand.Reader)
	_, err = VerifyProvisioningJWT(raw, hex.EncodeToString(other))
	require.ErrorIs(t, err, ErrInvalidJWT)
	_, err = VerifyProvisioningJWT("", hex.EncodeToString(pub))
	require.ErrorIs(t, err, ErrInvalidJWT)
	_, err = VerifyProvisioningJWT(raw[:len(raw)-4]+"AAAA", hex.EncodeToString(pub))
	require.ErrorIs(t, err, ErrInvalidJWT)
}

func TestVerifyProvisioningJWTWithRSAFile(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "public.pem")
	require.NoError(t, os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644))
	_, err = VerifyProvisioningJWT(provisioningJWT(t, key), file)
	require.NoError(t, err)
}

func TestExpiredProvisioningJWTIsRejected(t *testing.T) {
	pub, pri, _ := ed25519.GenerateKey(rand.Reader)
	claims, err := tokens.NewProvisioningClaims(true, true, "t", "", "", []string{"nats://x:1"}, "", "", "", "choria", "", time.Hour)
	require.NoError(t, err)
	claims.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Minute))
	raw, err := tokens.SignToken(claims, pri)
	require.NoError(t, err)
	_, err = VerifyProvisioningJWT(raw, hex.EncodeToString(pub))
	require.ErrorIs(t, err, ErrInvalidJWT)
}

func TestNonceSignature(t *testing.T) {
	pub, pri, _ := ed25519.GenerateKey(rand.Reader)
	sig := ed25519.Sign(pri, []byte("nonce-1"))
	require.NoError(t, VerifyNonceSignature(hex.EncodeToString(pub), hex.EncodeToString(sig), "nonce-1"))
	require.ErrorIs(t, VerifyNonceSignature(hex.EncodeToString(pub), hex.EncodeToString(sig), "nonce-2"), ErrBadNonce)
	require.ErrorIs(t, VerifyNonceSignature("zz", hex.EncodeToString(sig), "nonce-1"), ErrBadNonce)
	require.ErrorIs(t, VerifyNonceSignature(hex.EncodeToString(pub), "not-hex", "nonce-1"), ErrBadNonce)
}
