package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	cpc "github.com/choria-io/go-choria/client/choria_provisionclient"
)

// Gen25519 asks the server for a new ed25519 key, signing a nonce fresh to this attempt, and
// verifies the signature.
func (a *Activities) Gen25519(ctx context.Context, in HostInput) (*ED25519Result, error) {
	nb := make([]byte, 32)
	if _, err := rand.Read(nb); err != nil {
		return nil, err
	}
	nonce := hex.EncodeToString(nb)
	r, err := callProvision(ctx, a, in.Identity, "gen25519", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.Gen25519Output, error) {
		return do[*cpc.Gen25519Result, *cpc.Gen25519Output](ctx, pc.Gen25519(nonce, a.set.Token))
	})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	if err := VerifyNonceSignature(r.PublicKey(), r.Signature(), nonce); err != nil {
		return nil, NewError(ErrTypeBadSignature, err.Error(), err)
	}
	return &ED25519Result{PublicKey: r.PublicKey(), Directory: r.Directory(), Signature: r.Signature()}, nil
}
