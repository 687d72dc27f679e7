// Package codec encrypts every payload the provisioner writes to Temporal with AES-256-GCM, so
// that helper configurations, signed JWTs and keys are never plain text in workflow history.
package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// Metadata written on encrypted payloads.
const (
	MetadataEncoding = "encoding"
	EncodingName     = "binary/encrypted"
	MetadataKeyID    = "encryption-key-id"
)

// ErrUnknownKey is returned for a payload encrypted with a key this codec does not hold.
var ErrUnknownKey = errors.New("payload encrypted with an unknown key")

// Codec is a converter.PayloadCodec. The first key encrypts; every key decrypts, so keys rotate
// by putting the new key first and keeping the old ones after it until old histories expire.
type Codec struct {
	activeID string
	aeads    map[string]cipher.AEAD
}

var _ converter.PayloadCodec = (*Codec)(nil)

// New builds a codec from hex-encoded 32-byte keys, active key first.
func New(hexKeys ...string) (*Codec, error) {
	c := &Codec{aeads: map[string]cipher.AEAD{}}
	for i, hk := range hexKeys {
		key, err := hex.DecodeString(strings.TrimSpace(hk))
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("codec key %d is not 64 hex characters (32 bytes)", i+1)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		id := KeyID(key)
		if i == 0 {
			c.activeID = id
		}
		c.aeads[id] = aead
	}
	if c.activeID == "" {
		return nil, errors.New("no codec key given")
	}
	return c, nil
}

// KeyID names a key without revealing it.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:6])
}

// LoadKeyFile reads keys from file, one hex key a line, active key first; blank lines and lines
// starting with # are ignored.
func LoadKeyFile(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading codec key file: %w", err)
	}
	var keys []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys = append(keys, line)
	}
	return keys, nil
}

// NewKey returns a fresh random key in hex.
func NewKey() string {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(k)
}

// ActiveKeyID is the ID of the key that encrypts.
func (c *Codec) ActiveKeyID() string { return c.activeID }

// Encode encrypts each payload whole (metadata and data).
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	aead := c.aeads[c.activeID]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encoding payload: %w", err)
		}
		nonce := make([]byte, aead.NonceSize())
		if _, err := rand.Read(nonce); err != nil {
			return nil, err
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{MetadataEncoding: []byte(EncodingName), MetadataKeyID: []byte(c.activeID)},
			Data:     aead.Seal(nonce, nonce, plain, []byte(c.activeID)),
		}
	}
	return out, nil
}

// Decode decrypts payloads this codec encrypted and passes others through unchanged.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[MetadataEncoding]) != EncodingName {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		aead, ok := c.aeads[id]
		if !ok {
			return nil, fmt.Errorf("%w: key id %q", ErrUnknownKey, id)
		}
		data := p.GetData()
		if len(data) < aead.NonceSize() {
			return nil, errors.New("encrypted payload is too short")
		}
		plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte(id))
		if err != nil {
			return nil, fmt.Errorf("decrypting payload with key %s: %w", id, err)
		}
		dp := &commonpb.Payload{}
		if err := proto.Unmarshal(plain, dp); err != nil {
			return nil, fmt.Errorf("decoding decrypted payload: %w", err)
		}
		out[i] = dp
	}
	return out, nil
}

// DataConverter wraps the SDK's default converter with the codec.
func DataConverter(c *Codec) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}
