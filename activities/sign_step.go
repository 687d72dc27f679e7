package activities

import (
	"context"

	"go.uber.org/zap"
)

// StepSign is the step as status, search attributes and logs name it; SignServerJWTName its activity.
const StepSign, SignServerJWTName = "sign", "SignServerJWT"

// SignServerJWT makes the host's server JWT (ed25519 feature).
func (a *Activities) SignServerJWT(ctx context.Context, in SignInput) (*SignResult, error) {
	if err := a.refuseBanned(ctx, in.Identity); err != nil {
		return nil, err
	}
	s, err := a.signer.Sign(in)
	if err != nil {
		return nil, NewError(ErrTypeSigning, err.Error(), err)
	}
	if !s.CappedAt.IsZero() {
		// the Choria Provisioner signs these too (the broker accepts them): say so once per host
		a.logger(ctx, in.Identity, StepSign).Warn("server JWT expiry capped at jwt_signing_token's expiry",
			zap.Time("asked_expiry", s.Asked.UTC()), zap.Time("expiry", s.CappedAt.UTC()))
	}
	return &SignResult{JWT: s.JWT, Signer: s.Signer}, nil
}
