package activities

import "context"

// SignServerJWT makes the host's server JWT (ed25519 feature).
func (a *Activities) SignServerJWT(ctx context.Context, in SignInput) (string, error) {
	s, err := a.signer.Sign(in)
	if err != nil {
		return "", NewError(ErrTypeSigning, err.Error(), err)
	}
	return s, nil
}
