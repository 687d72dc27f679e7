package activities

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/choria-io/tokens"
)

// StepJWT is the step as status, search attributes and logs name it; FetchJWTName its activity.
const StepJWT, FetchJWTName = "jwt", "FetchJWT"

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

// VerifyProvisioningJWT checks the server's provisioning JWT against jwt_verify_cert, which is
// either a file (RSA public key or certificate, or an ed25519 key) or a hex ed25519 public key.
func VerifyProvisioningJWT(raw string, verifyCert string) (*tokens.ProvisioningClaims, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: the server returned no JWT", ErrInvalidJWT)
	}
	var (
		claims *tokens.ProvisioningClaims
		err    error
	)
	if _, statErr := os.Stat(verifyCert); statErr == nil {
		claims, err = tokens.ParseProvisioningTokenWithKeyfile(raw, verifyCert)
	} else {
		pk, hexErr := hex.DecodeString(verifyCert)
		if hexErr != nil || len(pk) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: jwt_verify_cert %q is neither a file nor a hex ed25519 key", ErrInvalidJWT, verifyCert)
		}
		claims, err = tokens.ParseProvisioningToken(raw, ed25519.PublicKey(pk))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJWT, err)
	}
	return claims, nil
}
