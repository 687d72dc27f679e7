package activities

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"regexp"
	"testing"

	"github.com/choria-io/go-choria/choria"
	"github.com/stretchr/testify/require"
)

func makeCSR(t testing.TB, cn string, dns ...string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}, key)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// choriaDenyList is the Choria Provisioner's default cert_deny_list, as the worker hands it on.
var choriaDenyList = []*regexp.Regexp{regexp.MustCompile(`\.privileged.mcollective$`), regexp.MustCompile(`\.privileged.choria$`),
	regexp.MustCompile(`\.mcollective$`), regexp.MustCompile(`\.choria$`)}

func TestValidateCSR(t *testing.T) {
	deny := choriaDenyList
	require.NoError(t, ValidateCSR(makeCSR(t, "n1.example.net"), "n1.example.net", deny))
	require.ErrorIs(t, ValidateCSR(makeCSR(t, "n2.example.net"), "n1.example.net", deny), ErrCSRMismatch)
	require.ErrorIs(t, ValidateCSR(makeCSR(t, "n1.privileged.choria"), "n1.privileged.choria", deny), ErrCSRDenied)
	require.ErrorIs(t, ValidateCSR(makeCSR(t, "n1.mcollective"), "n1.mcollective", deny), ErrCSRDenied)
	require.ErrorIs(t, ValidateCSR(makeCSR(t, "n1.example.net", "admin.privileged.mcollective"), "n1.example.net", deny), ErrCSRDenied)
	require.ErrorIs(t, ValidateCSR(makeCSR(t, "web1.dc1", "db1.dc1"), "web1.dc1", []*regexp.Regexp{regexp.MustCompile(`^db`)}), ErrCSRDenied, "a DNS name")
	require.ErrorIs(t, ValidateCSR("not pem", "n1", deny), ErrCSRInvalid)
	require.ErrorIs(t, ValidateCSR("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", "n1", deny), ErrCSRInvalid)
}

func FuzzValidateCSR(f *testing.F) {
	f.Add(makeCSR(f, "n1.example.net"), "n1.example.net")
	f.Add("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n", "n1")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, csr, identity string) {
		_ = ValidateCSR(csr, identity, choriaDenyList) // must not panic
	})
}

func FuzzVerifyProvisioningJWT(f *testing.F) {
	f.Add("eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.e30.AAAA")
	f.Add("")
	f.Add("a.b.c")
	pub := hex.EncodeToString(make([]byte, 32))
	f.Fuzz(func(t *testing.T, raw string) {
		_, err := VerifyProvisioningJWT(raw, pub)
		require.Error(t, err, "nothing is signed by the all-zero key")
	})
}

// The key the helper supplies reaches the server readable only with the server's ECDH half:
// decrypting as go-choria's agent does gives the same key back.
func TestEncryptKeyForServer(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	serverPri, serverPub, err := choria.ECDHKeyPair()
	require.NoError(t, err)

	enc, provPub, err := EncryptKeyForServer(keyPEM, hex.EncodeToString(serverPub))
	require.NoError(t, err)
	require.NotContains(t, enc, string(pem.EncodeToMemory(&pem.Block{Type: "X", Bytes: x509.MarshalPKCS1PrivateKey(key)}))[20:60])

	pp, err := hex.DecodeString(provPub)
	require.NoError(t, err)
	secret, err := choria.ECDHSharedSecret(serverPri, pp)
	require.NoError(t, err)
	block, _ := pem.Decode([]byte(enc))
	require.True(t, x509.IsEncryptedPEMBlock(block))  //nolint:staticcheck
	plain, err := x509.DecryptPEMBlock(block, secret) //nolint:staticcheck
	require.NoError(t, err)
	require.Equal(t, x509.MarshalPKCS1PrivateKey(key), plain)

	_, _, err = EncryptKeyForServer(keyPEM, "")
	require.ErrorIs(t, err, ErrNoECDH)
	_, _, err = EncryptKeyForServer("not a key", hex.EncodeToString(serverPub))
	require.ErrorIs(t, err, ErrBadKey)
}

func TestHelperInputKeysAreTheContract(t *testing.T) {
	// attempt counts travel in history but never reach the helper
	b, err := jsonMarshal(&ED25519Result{PublicKey: "p", Directory: "d", Signature: "s"})
	require.NoError(t, err)
	require.JSONEq(t, `{"public_key":"p","directory":"d","signature":"s"}`, string(b))
	b, err = jsonMarshal(&CSRResult{CSR: "c", PublicKey: "p", SSLDir: "s"})
	require.NoError(t, err)
	require.JSONEq(t, `{"csr":"c","public_key":"p","ssldir":"s"}`, string(b))
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
