package activities

import (
	"context"

	cpc "github.com/choria-io/go-choria/client/choria_provisionclient"
)

// FetchJWT calls choria_provision#jwt and verifies the JWT against jwt_verify_cert.
func (a *Activities) FetchJWT(ctx context.Context, in HostInput) (*JWTResult, error) {
	reply, err := callProvision(ctx, a, in.Identity, "jwt", func(ctx context.Context, pc *cpc.ChoriaProvisionClient) ([]*cpc.JwtOutput, error) {
		return do[*cpc.JwtResult, *cpc.JwtOutput](ctx, pc.Jwt(a.set.Token))
	})
	if err != nil {
		return nil, a.stale(ctx, in, err)
	}
	claims, err := VerifyProvisioningJWT(reply.Jwt(), a.set.JWTVerifyCert)
	if err != nil {
		return nil, NewError(ErrTypeInvalidJWT, err.Error(), err)
	}
	had := claims.Token != ""
	claims.Token = ""
	return &JWTResult{Claims: claims, ECDHPublic: reply.EcdhPublic(), HadToken: had}, nil
}
