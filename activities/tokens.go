package activities

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/choria-io/tokens"
)

// Sentinel errors of token handling.
var (
	ErrInvalidJWT       = errors.New("provisioning JWT is not valid")
	ErrBadNonce         = errors.New("ed25519 nonce signature does not verify")
	ErrSigning          = errors.New("cannot sign server JWT")
	ErrNoChainSignature = errors.New("jwt_signing_token has no trust chain signature")
)

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

// ServerJWTSigner makes server JWTs the way the Choria Provisioner does, from jwt_signing_key and,
// when set, the chain issuer data of jwt_signing_token. Files are read per signature so that
// rotated secrets take effect without a restart.
type ServerJWTSigner struct {
	SigningKey      string
	SigningToken    string
	DefaultValidity time.Duration
	Now             func() time.Time
}

// Sign returns a signed server JWT for in.
func (s *ServerJWTSigner) Sign(in SignInput) (string, error) {
	if s.SigningKey == "" {
		return "", fmt.Errorf("%w: no jwt_signing_key configured", ErrSigning)
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	pk, err := hex.DecodeString(in.PublicKey)
	if err != nil || len(pk) != ed25519.PublicKeySize {
		return "", fmt.Errorf("%w: server public key %q is not a hex ed25519 key", ErrSigning, in.PublicKey)
	}

	org := "choria"
	validity := s.DefaultValidity
	collectives := []string{"mcollective"}
	var pubSubs []string
	var perms *tokens.ServerPermissions

	// go-choria defaults to the choria collective with protocol v2 security
	if in.Config["plugin.security.provider"] == "choria" {
		collectives = []string{"choria"}
	}
	if cc, ok := in.Config["collectives"]; ok && cc != "" {
		collectives = splitList(cc)
	}
	if c := in.Claims; c != nil {
		if c.OrganizationUnit != "" {
			org = c.OrganizationUnit
		}
		if c.ExpiresAt != nil && !c.ExpiresAt.IsZero() {
			validity = c.ExpiresAt.Time.Sub(now())
		}
		if len(c.Collectives) > 0 {
			collectives = c.Collectives
		}
		pubSubs = c.AdditionalPublishSubjects
		perms = c.Permissions
	}
	// as the Choria Provisioner: an expiry within the hour (or in the past) means "use the default"
	if validity <= time.Hour {
		validity = s.DefaultValidity
	}
	for _, c := range collectives {
		if c == "" || strings.ContainsAny(c, ".>* \t") {
			return "", fmt.Errorf("%w: server_claims collective %q is not a valid name", ErrSigning, c)
		}
	}
	if !nameRe.MatchString(org) {
		return "", fmt.Errorf("%w: server_claims ou %q is not a valid organization unit", ErrSigning, org)
	}
	for _, subj := range pubSubs {
		if subj == "" || strings.ContainsAny(subj, " \t\r\n") || subj == ">" || strings.HasPrefix(subj, ">") || strings.HasPrefix(subj, "*.>") {
			return "", fmt.Errorf("%w: server_claims pub_subjects entry %q is not an allowed subject", ErrSigning, subj)
		}
	}

	claims, err := tokens.NewServerClaims(in.Identity, collectives, org, perms, pubSubs, pk, "Choria Provisioner", validity)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrSigning, err)
	}

	if s.SigningToken != "" {
		t, err := os.ReadFile(s.SigningToken)
		if err != nil {
			return "", fmt.Errorf("%w: reading jwt_signing_token: %v", ErrSigning, err)
		}
		signer, err := tokens.ParseClientIDTokenUnverified(strings.TrimSpace(string(t)))
		if err != nil {
			return "", fmt.Errorf("%w: parsing jwt_signing_token: %v", ErrSigning, err)
		}
		if signer.TrustChainSignature == "" {
			return "", fmt.Errorf("%w: %w", ErrSigning, ErrNoChainSignature)
		}
		if signer.ExpiresAt != nil && claims.ExpiresAt != nil && claims.ExpiresAt.After(signer.ExpiresAt.Time) {
			// go-choria rejects a chained token that outlives its issuer, so refuse to make one
			return "", fmt.Errorf("%w: server JWT would expire %s, after jwt_signing_token itself (%s)", ErrSigning,
				claims.ExpiresAt.UTC().Format(time.RFC3339), signer.ExpiresAt.UTC().Format(time.RFC3339))
		}
		seed, err := readSeed(s.SigningKey)
		if err != nil {
			return "", err
		}
		if err := claims.AddChainIssuerData(signer, seed); err != nil {
			return "", fmt.Errorf("%w: chain issuer data: %v", ErrSigning, err)
		}
	}

	signed, err := tokens.SignTokenWithKeyFile(claims, s.SigningKey)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrSigning, err)
	}
	return signed, nil
}

var nameRe = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

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

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
