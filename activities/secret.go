package activities

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// SealedSecret is a secret as history holds it: sealed under the worker's secrets key
// (secrets_key_file), which the codec server does not hold. Whoever may read history through the
// codec server sees that a secret was sent and its fingerprint (a private key's public key),
// never the secret: viewing the fleet's history and holding its identities are not the same
// permission.
type SealedSecret struct {
	Sealed      string `json:"sealed"`
	Fingerprint string `json:"sha256"`
}

// ErrNoSecretsKey: a helper answered with a private key and the worker has no secrets key to
// seal it under, so it would sit in history readable by every codec-server caller.
var ErrNoSecretsKey = errors.New("the helper returned a private key and secrets_key_file is not set: " +
	"the key would be readable by everyone who may view history through the codec server; set secrets_key_file " +
	"(a key only the workers hold, never given to the codec server: openssl rand -hex 32 > secrets.key, mode 0600) and retry the host")

// SecretBox seals and opens secrets for one host's workflow, with a key only the workers hold.
type SecretBox struct {
	aead cipher.AEAD
}

// NewSecretBox is a box over a 32-byte key given in hex.
func NewSecretBox(hexKey string) (*SecretBox, error) {
	key, err := hex.DecodeString(strings.TrimSpace(hexKey))
	if err != nil || len(key) != 32 {
		return nil, errors.New("the secrets key is not 32 bytes of hex")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return &SecretBox{aead: aead}, nil
}

// WithSecretBox seals the helper's private keys under box (nil: a helper key fails its host).
func WithSecretBox(box *SecretBox) Option { return func(a *Activities) { a.secrets = box } }

// binding ties a sealed secret to its host's workflow and its use: a sealed key copied into
// another host's run does not open.
func binding(workflowID string) []byte {
	return []byte("choria-provisioner/private-key/v1\x00" + workflowID)
}

// Seal seals secret for the workflow workflowID.
func (b *SecretBox) Seal(workflowID, secret string) (*SealedSecret, error) {
	if b == nil {
		return nil, ErrNoSecretsKey
	}
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("sealing a secret: %w", err)
	}
	out := b.aead.Seal(nonce, nonce, []byte(secret), binding(workflowID))
	return &SealedSecret{Sealed: base64.StdEncoding.EncodeToString(out), Fingerprint: KeyFingerprint(secret)}, nil
}

// Open opens a secret sealed for workflowID.
func (b *SecretBox) Open(workflowID string, s *SealedSecret) (string, error) {
	if b == nil {
		return "", errors.New("a sealed private key and no secrets_key_file to open it: configure the key it was sealed under")
	}
	raw, err := base64.StdEncoding.DecodeString(s.Sealed)
	if err != nil || len(raw) < b.aead.NonceSize() {
		return "", errors.New("the sealed private key is malformed")
	}
	n := b.aead.NonceSize()
	plain, err := b.aead.Open(nil, raw[:n], raw[n:], binding(workflowID))
	if err != nil {
		return "", errors.New("the sealed private key does not open under this worker's secrets key for this host " +
			"(another host's, or sealed under another secrets_key_file)")
	}
	return string(plain), nil
}

// KeyFingerprint names a PEM private key by its public key (sha256 of the PKIX DER, as an x509
// certificate's key would be named), or by the PEM's own digest when it does not parse.
func KeyFingerprint(keyPEM string) string {
	sum := sha256.Sum256([]byte(keyPEM))
	if block, _ := pem.Decode([]byte(keyPEM)); block != nil {
		if pub := publicOf(block.Bytes); pub != nil {
			if der, err := x509.MarshalPKIXPublicKey(pub); err == nil {
				sum = sha256.Sum256(der)
			}
		}
	}
	return hex.EncodeToString(sum[:])
}

func publicOf(der []byte) any {
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return &k.PublicKey
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return &k.PublicKey
	}
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		if s, ok := k.(interface{ Public() any }); ok {
			return s.Public()
		}
	}
	return nil
}
