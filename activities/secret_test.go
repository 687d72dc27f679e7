package activities

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A private key sealed for one host's workflow opens for that workflow only, under the key it was
// sealed with; what history shows of it is its public key's fingerprint, never the key.
func TestSecretBoxSealsForOneHost(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalECPrivateKey(k)
	require.NoError(t, err)
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))

	box, err := NewSecretBox(strings.Repeat("ab", 32))
	require.NoError(t, err)
	sealed, err := box.Seal("provision:n1.example", keyPEM)
	require.NoError(t, err)
	require.NotContains(t, sealed.Sealed, "PRIVATE KEY")
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	require.NoError(t, err)
	sum := sha256.Sum256(pub)
	require.Equal(t, hex.EncodeToString(sum[:]), sealed.Fingerprint, "named by its public key")

	got, err := box.Open("provision:n1.example", sealed)
	require.NoError(t, err)
	require.Equal(t, keyPEM, got)

	_, err = box.Open("provision:n2.example", sealed)
	require.ErrorContains(t, err, "does not open", "another host's run")
	other, err := NewSecretBox(strings.Repeat("cd", 32))
	require.NoError(t, err)
	_, err = other.Open("provision:n1.example", sealed)
	require.ErrorContains(t, err, "does not open", "another secrets key")

	var none *SecretBox
	_, err = none.Seal("provision:n1.example", keyPEM)
	require.ErrorIs(t, err, ErrNoSecretsKey, "no secrets key: the key is not put in history")
	_, err = NewSecretBox("abcd")
	require.Error(t, err)
}
