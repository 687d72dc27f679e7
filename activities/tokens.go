package activities

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/choria-io/tokens"
	"github.com/golang-jwt/jwt/v5"
)

// ServerJWTSigner makes server JWTs the way the Choria Provisioner does, from jwt_signing_key and,
// when set, the chain issuer data of jwt_signing_token. Files are read per signature so that
// rotated secrets take effect without a restart.
type ServerJWTSigner struct {
	SigningKey      string
	SigningToken    string
	DefaultValidity time.Duration
	Now             func() time.Time
}

// Signed is a server JWT and what signing changed of what was asked for.
type Signed struct {
	JWT string
	// Signer is jwt_signing_key's ID (SignerKeyID)
	Signer string
	// Asked is the expiry the helper's claims or server_jwt_validity asked for; CappedAt, when
	// set, is the earlier expiry the token got: that of jwt_signing_token, which a chained token
	// cannot outlive (go-choria's tokens package caps it the same way for the Choria Provisioner).
	Asked    time.Time
	CappedAt time.Time
}

// Sign returns a signed server JWT for in. It refuses what go-choria would refuse or what could
// never be used: no signing key, an expired jwt_signing_token, one without a trust chain signature.
func (s *ServerJWTSigner) Sign(in SignInput) (Signed, error) {
	if s.SigningKey == "" {
		return Signed{}, fmt.Errorf("%w: no jwt_signing_key configured", ErrSigning)
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	claims, err := s.claims(in, now())
	if err != nil {
		return Signed{}, err
	}
	out := Signed{}
	if claims.ExpiresAt != nil {
		out.Asked = claims.ExpiresAt.Time
	}
	if s.SigningToken != "" {
		if err := s.chain(claims, now(), &out); err != nil {
			return Signed{}, err
		}
	}
	signed, err := tokens.SignTokenWithKeyFile(claims, s.SigningKey)
	if err != nil {
		return Signed{}, fmt.Errorf("%w: %v", ErrSigning, err)
	}
	out.JWT = signed
	if seed, err := readSeed(s.SigningKey); err == nil {
		out.Signer = SignerKeyID(seed.Public().(ed25519.PublicKey))
	}
	return out, nil
}

// SignerKeyID names a signing key in an identity's record: the hex of its ed25519 public key,
// as Choria names issuers (`choria jwt` prints it), public and the same on every replica.
func SignerKeyID(pub ed25519.PublicKey) string { return "ed25519:" + hex.EncodeToString(pub) }

// chain chains the claims to jwt_signing_token, as go-choria does: the token then ends when the
// signer's ends, if that is earlier (out.CappedAt says so). Only an expired or unchained signer
// is refused.
func (s *ServerJWTSigner) chain(claims *tokens.ServerClaims, now time.Time, out *Signed) error {
	t, err := os.ReadFile(s.SigningToken)
	if err != nil {
		return fmt.Errorf("%w: reading jwt_signing_token: %v", ErrSigning, err)
	}
	signer, err := tokens.ParseClientIDTokenUnverified(strings.TrimSpace(string(t)))
	if err != nil {
		return fmt.Errorf("%w: parsing jwt_signing_token: %v", ErrSigning, err)
	}
	if signer.TrustChainSignature == "" {
		return fmt.Errorf("%w: %w", ErrSigning, ErrNoChainSignature)
	}
	// a token chained to an expired signer expires with it: the broker would refuse it
	if signer.ExpiresAt != nil && !signer.ExpiresAt.After(now) {
		return fmt.Errorf("%w: %w at %s", ErrSigning, ErrSignerExpired, signer.ExpiresAt.UTC().Format(time.RFC3339))
	}
	seed, err := readSeed(s.SigningKey)
	if err != nil {
		return err
	}
	if err := claims.AddChainIssuerData(signer, seed); err != nil {
		return fmt.Errorf("%w: chain issuer data: %v", ErrSigning, err)
	}
	// ends with the signer token: capped (or asked for that very second, which the timeline,
	// reading exp and issexp, reports alike)
	if claims.ExpiresAt != nil && !claims.ExpiresAt.Time.After(out.Asked) && claims.ExpiresAt.Equal(claims.IssuerExpiresAt.Time) {
		out.CappedAt = claims.ExpiresAt.Time
	}
	return nil
}

// SignerCappedExpiry reads a signed server JWT's expiry, without verifying it, and reports whether
// it is the signer token's own (the asked expiry was later and was capped). It is a pure function
// of the token, so workflow code may call it to show the cap in a host's timeline.
func SignerCappedExpiry(raw string) (time.Time, bool) {
	exp, issexp, ok := expiries(raw)
	if !ok || issexp.IsZero() {
		return time.Time{}, false
	}
	return exp, exp.Equal(issexp)
}

// JWTExpiry reads a JWT's exp without verifying it: false when it has none or is not a JWT. A
// pure function of the token, for workflow code.
func JWTExpiry(raw string) (time.Time, bool) {
	exp, _, ok := expiries(raw)
	return exp, ok
}

// expiries reads a JWT's exp and issexp (zero when absent); ok is false without exp.
func expiries(raw string) (exp, issexp time.Time, ok bool) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return exp, issexp, false
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return exp, issexp, false
	}
	var c struct {
		Exp    *jwt.NumericDate `json:"exp"`
		IssExp *jwt.NumericDate `json:"issexp"`
	}
	if json.Unmarshal(body, &c) != nil || c.Exp == nil {
		return exp, issexp, false
	}
	if c.IssExp != nil {
		issexp = c.IssExp.Time
	}
	return c.Exp.Time, issexp, true
}

func readSeed(file string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: reading jwt_signing_key: %v", ErrSigning, err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: jwt_signing_key is not a hex ed25519 seed", ErrSigning)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}
