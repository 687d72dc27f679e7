package activities

import (
	"context"
)

// FetchJWT calls choria_provision#jwt and verifies the JWT against jwt_verify_cert.
func (a *Activities) FetchJWT(ctx context.Context, in HostInput) (*JWTResult, error) {
	reply, err := a.provision(ctx, in.Identity, "jwt", map[string]any{"token": a.set.Token})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	out, err := outputs("choria_provision#jwt", reply, "jwt", "ecdh_public")
	if err != nil {
		return nil, err
	}
	claims, err := VerifyProvisioningJWT(out[0], a.set.JWTVerifyCert)
	if err != nil {
		return nil, NewError(ErrTypeInvalidJWT, err.Error(), err)
	}
	had := claims.Token != ""
	claims.Token = ""
	return &JWTResult{Claims: claims, ECDHPublic: out[1], HadToken: had}, nil
}
