// Package codec encrypts every payload the provisioner writes to Temporal with AES-256-GCM, so
// that helper configurations, signed JWTs and keys are never plain text in workflow history, and
// binds each payload to the workflow it was written for, so that a worker reads only payloads it
// wrote for the very workflow it is working on.
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
	// MetadataBinding is the workflow ID the payload was written for ("" when the SDK named
	// none). The associated data covers it, so it cannot be changed without the key.
	MetadataBinding = "encryption-binding"
)

// ErrUnknownKey is returned for a payload encrypted with a key this codec does not hold.
var ErrUnknownKey = errors.New("payload encrypted with an unknown key")

// Codec is a converter.PayloadCodec. The first key encrypts; every key decrypts, so keys rotate
// by putting the new key first and keeping the old ones after it until old histories expire.
//
// A Codec from New decodes every payload of its keys, whatever workflow it was written for, and
// passes payloads that are not encrypted through: what operators' tools need (the codec server,
// the CLI). Worker returns the codec a worker decodes with, which refuses the rest.
type Codec struct {
	activeID string
	aeads    map[string]cipher.AEAD
	// strict refuses payloads that are not ours or not bound to the workflow decoded for
	strict   bool
	onRefuse func(*RefusedError)
}

var (
	_ converter.PayloadCodec                         = (*Codec)(nil)
	_ converter.PayloadCodecWithSerializationContext = (*Codec)(nil)
)

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

// Worker is the codec with the worker's rules: every payload must be encrypted with one of its
// keys, and bound to the workflow it is decoded for whenever the SDK names that workflow.
// onRefuse (may be nil) hears of every refusal, before the error is returned.
func (c *Codec) Worker(onRefuse func(*RefusedError)) *Codec {
	w := *c
	w.strict, w.onRefuse = true, onRefuse
	return &w
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

// associatedData is what GCM authenticates besides the ciphertext: the key ID and the binding.
// The key ID is fixed-length hex, so the NUL separates unambiguously, and a payload of the
// unbound format (the key ID alone, written before payloads were bound) can never be relabelled
// as bound, nor the other way round.
func associatedData(keyID, binding string) []byte {
	return []byte(keyID + "\x00" + binding)
}

// Encode encrypts each payload whole (metadata and data), bound to no workflow: the SDK binds
// through WithSerializationContext wherever it knows the workflow.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return c.encode(payloads, "")
}

func (c *Codec) encode(payloads []*commonpb.Payload, binding string) ([]*commonpb.Payload, error) {
	aead := c.aeads[c.activeID]
	ad := associatedData(c.activeID, binding)
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encoding payload: %w", err)
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, err
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{MetadataEncoding: []byte(EncodingName), MetadataKeyID: []byte(c.activeID), MetadataBinding: []byte(binding)},
			Data:     aead.Seal(nonce, nonce, plain, ad),
		}
	}
	return out, nil
}

// Decode decrypts payloads of this codec's keys, whatever workflow they were bound to. The
// operators' codec passes payloads that are not encrypted through; the worker's refuses them.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return c.decode(payloads, "", false)
}

// decode decrypts payloads; with known, each must be bound to workflowID (worker codec only).
func (c *Codec) decode(payloads []*commonpb.Payload, workflowID string, known bool) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		dp, err := c.decodeOne(p, workflowID, known && c.strict)
		if err != nil {
			var refused *RefusedError
			if errors.As(err, &refused) && c.onRefuse != nil {
				c.onRefuse(refused)
			}
			return nil, err
		}
		out[i] = dp
	}
	return out, nil
}

func (c *Codec) decodeOne(p *commonpb.Payload, workflowID string, bound bool) (*commonpb.Payload, error) {
	md := p.GetMetadata()
	refuse := func(reason string) error {
		return &RefusedError{Reason: reason, WorkflowID: workflowID, Binding: string(md[MetadataBinding]), KeyID: string(md[MetadataKeyID])}
	}
	if string(md[MetadataEncoding]) != EncodingName {
		if c.strict {
			return nil, refuse(ReasonPlaintext)
		}
		return p, nil
	}
	id := string(md[MetadataKeyID])
	aead, ok := c.aeads[id]
	if !ok {
		if c.strict {
			return nil, refuse(ReasonUnknownKey)
		}
		return nil, fmt.Errorf("%w: key id %q", ErrUnknownKey, id)
	}
	binding, hasBinding := md[MetadataBinding]
	ad := []byte(id) // the unbound format
	switch {
	case bound && len(binding) == 0:
		return nil, refuse(ReasonUnbound)
	case bound && string(binding) != workflowID:
		return nil, refuse(ReasonForeignBinding)
	case bound:
		ad = associatedData(id, workflowID) // what this workflow's payloads were sealed with
	case hasBinding:
		ad = associatedData(id, string(binding))
	}
	data := p.GetData()
	if len(data) < aead.NonceSize() {
		return nil, c.undecryptable(refuse, errors.New("encrypted payload is too short"))
	}
	plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], ad)
	if err != nil {
		return nil, c.undecryptable(refuse, fmt.Errorf("decrypting payload with key %s: %w", id, err))
	}
	dp := &commonpb.Payload{}
	if err := proto.Unmarshal(plain, dp); err != nil {
		return nil, fmt.Errorf("decoding decrypted payload: %w", err)
	}
	return dp, nil
}

// undecryptable is a refusal for the worker (tampered, or sealed for other associated data) and
// the plain error for operators.
func (c *Codec) undecryptable(refuse func(string) error, err error) error {
	if c.strict {
		return refuse(ReasonUndecryptable)
	}
	return err
}

// WithSerializationContext binds the codec to the workflow the SDK encodes or decodes for: the
// workflow of a workflow task, signal, query, start or continue-as-new, and the workflow that
// scheduled an activity (local ones included). Without a workflow ID (a standalone activity, a
// Nexus operation) the codec stays unbound.
func (c *Codec) WithSerializationContext(sc converter.SerializationContext) converter.PayloadCodec {
	if id := workflowOf(sc); id != "" {
		return &boundCodec{c: c, workflowID: id}
	}
	return c
}

func workflowOf(sc converter.SerializationContext) string {
	switch s := sc.(type) {
	case converter.WorkflowSerializationContext:
		return s.WorkflowID
	case converter.ActivitySerializationContext:
		return s.WorkflowID
	}
	return ""
}

// boundCodec is a Codec bound to one workflow: it seals payloads for it and, for a worker,
// opens only payloads sealed for it.
type boundCodec struct {
	c          *Codec
	workflowID string
}

func (b *boundCodec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return b.c.encode(payloads, b.workflowID)
}

func (b *boundCodec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return b.c.decode(payloads, b.workflowID, true)
}

// WithSerializationContext binds to another workflow (the SDK may bind a bound codec again).
func (b *boundCodec) WithSerializationContext(sc converter.SerializationContext) converter.PayloadCodec {
	return b.c.WithSerializationContext(sc)
}

// DataConverter wraps the SDK's default converter with the codec.
func DataConverter(c *Codec) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}
