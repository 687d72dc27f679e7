package activities

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// signerFixture is an issuer, and a provisioner chain-issuer token signed by it.
type signerFixture struct {
	issuerPub ed25519.PublicKey
	seedFile  string
	tokenFile string
	serverPub ed25519.PublicKey
}

func newSignerFixture(t *testing.T, validity time.Duration, chain bool) signerFixture {
	t.Helper()
	dir := t.TempDir()
	issuerPub, issuerPri, _ := ed25519.GenerateKey(rand.Reader)
	provPub, provPri, _ := ed25519.GenerateKey(rand.Reader)
	claims, err := tokens.NewClientIDClaims("provisioner", nil, "choria", nil, "", "", validity, &tokens.ClientPermissions{ServerProvisioner: true}, provPub)
	require.NoError(t, err)
	if chain {
		require.NoError(t, claims.AddOrgIssuerData(issuerPri))
	}
	tok, err := tokens.SignToken(claims, issuerPri)
	require.NoError(t, err)
	f := signerFixture{issuerPub: issuerPub, seedFile: filepath.Join(dir, "signer.seed"), tokenFile: filepath.Join(dir, "signer.jwt")}
	require.NoError(t, os.WriteFile(f.seedFile, []byte(hex.EncodeToString(provPri.Seed())), 0o600))
	require.NoError(t, os.WriteFile(f.tokenFile, []byte(tok), 0o600))
	f.serverPub, _, _ = ed25519.GenerateKey(rand.Reader)
	return f
}

func TestServerJWTChainsToTheIssuer(t *testing.T) {
	f := newSignerFixture(t, 5*365*24*time.Hour, true)
	s := &ServerJWTSigner{SigningKey: f.seedFile, SigningToken: f.tokenFile, DefaultValidity: 365 * 24 * time.Hour}
	exp := time.Now().Add(30 * 24 * time.Hour).Truncate(time.Second)
	out, err := s.Sign(SignInput{
		Identity: "n1.example", PublicKey: hex.EncodeToString(f.serverPub),
		Config: map[string]string{"plugin.security.provider": "choria"},
		Claims: &ServerClaims{ExpiresAt: jwt.NewNumericDate(exp), OrganizationUnit: "choria", Permissions: &tokens.ServerPermissions{Submission: true},
			AdditionalPublishSubjects: []string{"custom.registration"}},
	})
	require.NoError(t, err)
	require.True(t, out.CappedAt.IsZero(), "30 days fits in the signer's 5 years")
	claims, err := tokens.ParseServerToken(out.JWT, f.issuerPub)
	require.NoError(t, err)
	require.Equal(t, "n1.example", claims.ChoriaIdentity)
	require.Equal(t, []string{"choria"}, claims.Collectives)
	require.True(t, claims.Permissions.Submission)
	require.Equal(t, []string{"custom.registration"}, claims.AdditionalPublishSubjects)
	require.WithinDuration(t, exp, claims.ExpiresAt.Time, 2*time.Second)
	ok, err := claims.IsMatchingPublicKey(f.serverPub)
	require.NoError(t, err)
	require.True(t, ok)
}

func TestServerJWTDefaults(t *testing.T) {
	f := newSignerFixture(t, 5*365*24*time.Hour, true)
	s := &ServerJWTSigner{SigningKey: f.seedFile, SigningToken: f.tokenFile, DefaultValidity: 365 * 24 * time.Hour}
	// no claims, no provider: the mcollective collective; an expiry within the hour means the default
	out, err := s.Sign(SignInput{Identity: "n1", PublicKey: hex.EncodeToString(f.serverPub), Config: map[string]string{},
		Claims: &ServerClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(10 * time.Minute))}})
	require.NoError(t, err)
	claims, err := tokens.ParseServerToken(out.JWT, f.issuerPub)
	require.NoError(t, err)
	require.Equal(t, []string{"mcollective"}, claims.Collectives)
	require.WithinDuration(t, time.Now().Add(365*24*time.Hour), claims.ExpiresAt.Time, time.Minute)

	out, err = s.Sign(SignInput{Identity: "n1", PublicKey: hex.EncodeToString(f.serverPub), Config: map[string]string{"collectives": "a, b"}})
	require.NoError(t, err)
	claims, err = tokens.ParseServerToken(out.JWT, f.issuerPub)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, claims.Collectives)
}

func TestServerJWTErrors(t *testing.T) {
	f := newSignerFixture(t, 5*365*24*time.Hour, true)
	pk := hex.EncodeToString(f.serverPub)
	s := &ServerJWTSigner{SigningKey: f.seedFile, SigningToken: f.tokenFile, DefaultValidity: 365 * 24 * time.Hour}

	_, err := s.Sign(SignInput{Identity: "n1", PublicKey: "zz"})
	require.ErrorIs(t, err, ErrSigning)

	_, err = s.Sign(SignInput{Identity: "n1", PublicKey: pk, Claims: &ServerClaims{Collectives: []string{"bad.collective"}}})
	require.ErrorContains(t, err, "collective")
	for _, nonsense := range []*ServerClaims{
		{Collectives: []string{""}},
		{Collectives: []string{"*"}},
		{OrganizationUnit: "evil org"},
		{OrganizationUnit: "a.b"},
		{AdditionalPublishSubjects: []string{">"}},
		{AdditionalPublishSubjects: []string{"*.>"}},
		{AdditionalPublishSubjects: []string{"two words"}},
		{AdditionalPublishSubjects: []string{""}},
	} {
		_, err = s.Sign(SignInput{Identity: "n1", PublicKey: pk, Claims: nonsense})
		require.ErrorIs(t, err, ErrSigning, "%+v", nonsense)
		require.ErrorContains(t, err, "server_claims", "%+v", nonsense)
	}

	expired := newSignerFixture(t, -time.Minute, true)
	s4 := &ServerJWTSigner{SigningKey: expired.seedFile, SigningToken: expired.tokenFile, DefaultValidity: 365 * 24 * time.Hour}
	_, err = s4.Sign(SignInput{Identity: "n1", PublicKey: pk})
	require.ErrorIs(t, err, ErrSignerExpired)
	require.ErrorIs(t, err, ErrSigning)

	unchained := newSignerFixture(t, time.Hour*24*365*5, false)
	s2 := &ServerJWTSigner{SigningKey: unchained.seedFile, SigningToken: unchained.tokenFile, DefaultValidity: 365 * 24 * time.Hour}
	_, err = s2.Sign(SignInput{Identity: "n1", PublicKey: pk})
	require.ErrorIs(t, err, ErrNoChainSignature)

	s3 := &ServerJWTSigner{SigningKey: "", DefaultValidity: time.Hour * 2}
	_, err = s3.Sign(SignInput{Identity: "n1", PublicKey: pk})
	require.ErrorContains(t, err, "jwt_signing_key")
}

// The Choria Provisioner's documentation issues the signer token for 365 days and its default
// server_jwt_validity is a year, so every server JWT asks to outlive the signer: it is signed,
// ending with the signer token, as go-choria's tokens package makes it, and still verifies.
func TestServerJWTCappedAtTheSignerExpiry(t *testing.T) {
	// issued for 365 days a minute ago
	f := newSignerFixture(t, 365*24*time.Hour-time.Minute, true)
	signerExp := signerExpiry(t, f)
	s := &ServerJWTSigner{SigningKey: f.seedFile, SigningToken: f.tokenFile, DefaultValidity: 365 * 24 * time.Hour}
	pk := hex.EncodeToString(f.serverPub)
	for name, in := range map[string]SignInput{
		"default validity": {Identity: "n1", PublicKey: pk, Config: map[string]string{"plugin.security.provider": "choria"}},
		"helper exp of 10 years": {Identity: "n1", PublicKey: pk, Config: map[string]string{"plugin.security.provider": "choria"},
			Claims: &ServerClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(10 * 365 * 24 * time.Hour))}},
	} {
		out, err := s.Sign(in)
		require.NoError(t, err, name)
		require.Equal(t, signerExp.Unix(), out.CappedAt.Unix(), name)
		require.True(t, out.Asked.After(out.CappedAt), name)
		claims, err := tokens.ParseServerToken(out.JWT, f.issuerPub)
		require.NoError(t, err, "%s: a capped token verifies against the issuer", name)
		require.Equal(t, signerExp.Unix(), claims.ExpiresAt.Unix(), name)
		require.Equal(t, signerExp.Unix(), claims.ExpireTime().Unix(), name)
		exp, capped := SignerCappedExpiry(out.JWT)
		require.True(t, capped, name)
		require.Equal(t, signerExp.Unix(), exp.Unix(), name)
	}

	// a validity inside the signer's is left alone and not reported as capped
	out, err := s.Sign(SignInput{Identity: "n1", PublicKey: pk, Claims: &ServerClaims{ExpiresAt: jwt.NewNumericDate(time.Now().Add(30 * 24 * time.Hour))}})
	require.NoError(t, err)
	require.True(t, out.CappedAt.IsZero())
	_, capped := SignerCappedExpiry(out.JWT)
	require.False(t, capped)
	_, capped = SignerCappedExpiry("not.a.jwt")
	require.False(t, capped)
}

func signerExpiry(t *testing.T, f signerFixture) time.Time {
	t.Helper()
	b, err := os.ReadFile(f.tokenFile)
	require.NoError(t, err)
	c, err := tokens.ParseClientIDTokenUnverified(string(b))
	require.NoError(t, err)
	return c.ExpiresAt.Time
}
