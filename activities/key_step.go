package activities

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// StepGen25519 is the step as status, search attributes and logs name it; Gen25519Name its activity.
const StepGen25519, Gen25519Name = "gen25519", "Gen25519"

// Gen25519 asks the server for a new ed25519 key, signing a nonce fresh to this attempt, and
// verifies the signature.
func (a *Activities) Gen25519(ctx context.Context, in HostInput) (*ED25519Result, error) {
	nb := make([]byte, 32)
	if _, err := rand.Read(nb); err != nil {
		return nil, err
	}
	nonce := hex.EncodeToString(nb)
	r, err := a.provision(ctx, in.Identity, "gen25519", map[string]any{"nonce": nonce, "token": a.set.Token})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	out, err := outputs("choria_provision#gen25519", r, "public_key", "directory", "signature")
	if err != nil {
		return nil, err
	}
	if err := VerifyNonceSignature(out[0], out[2], nonce); err != nil {
		return nil, NewError(ErrTypeBadSignature, err.Error(), err)
	}
	return &ED25519Result{PublicKey: out[0], Directory: out[1], Signature: out[2]}, nil
}

// VerifyNonceSignature checks that the server signed nonce with the key it returned.
func VerifyNonceSignature(pubHex, sigHex, nonce string) error {
	pk, err := hex.DecodeString(pubHex)
	if err != nil || len(pk) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key %q is not a hex ed25519 key", ErrBadNonce, pubHex)
	}
	sig, err := hex.DecodeString(sigHex)
	if err != nil {
		return fmt.Errorf("%w: signature is not hex", ErrBadNonce)
	}
	if !ed25519.Verify(pk, []byte(nonce), sig) {
		return ErrBadNonce
	}
	return nil
}
