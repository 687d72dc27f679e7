package codec

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrTokenRejected is returned for a bearer token the identity provider did not sign for us.
var ErrTokenRejected = errors.New("access token rejected")

// OIDCVerifier checks the access tokens a Web UI with a login passes to the codec server
// (TEMPORAL_CODEC_PASS_ACCESS_TOKEN): JWTs signed by a key of the issuer's JWKS, for the
// audience, not expired. Keys are fetched from the issuer's discovery document and fetched again
// when a token names a key the set does not have (at most every refetchAfter).
type OIDCVerifier struct {
	issuer, audience string
	client           *http.Client
	jwksURI          string

	mu      sync.Mutex
	keys    map[string]any
	fetched time.Time
}

const refetchAfter = 30 * time.Second

// NewOIDCVerifier reads issuer's /.well-known/openid-configuration and its key set.
func NewOIDCVerifier(ctx context.Context, issuer, audience string, client *http.Client) (*OIDCVerifier, error) {
	if issuer == "" || audience == "" {
		return nil, errors.New("an OIDC issuer and audience are both required")
	}
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	v := &OIDCVerifier{issuer: strings.TrimRight(issuer, "/"), audience: audience, client: client}
	var disc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := v.get(ctx, v.issuer+"/.well-known/openid-configuration", &disc); err != nil {
		return nil, fmt.Errorf("OIDC discovery of %s: %w", issuer, err)
	}
	if disc.JWKSURI == "" {
		return nil, fmt.Errorf("OIDC discovery of %s names no jwks_uri", issuer)
	}
	if disc.Issuer != "" {
		v.issuer = disc.Issuer // tokens carry the issuer exactly as the provider spells it
	}
	v.jwksURI = disc.JWKSURI
	if err := v.refresh(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

func (v *OIDCVerifier) get(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
}

// refresh fetches the key set; the caller holds no lock.
func (v *OIDCVerifier) refresh(ctx context.Context) error {
	var set struct {
		Keys []struct {
			Kty, Kid, Use, N, E, Crv, X, Y string
		} `json:"keys"`
	}
	if err := v.get(ctx, v.jwksURI, &set); err != nil {
		return fmt.Errorf("OIDC key set: %w", err)
	}
	keys := map[string]any{}
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Kty {
		case "RSA":
			n, err1 := base64.RawURLEncoding.DecodeString(k.N)
			e, err2 := base64.RawURLEncoding.DecodeString(k.E)
			if err1 != nil || err2 != nil || len(e) > 4 {
				continue
			}
			keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			var curve elliptic.Curve
			switch k.Crv {
			case "P-256":
				curve = elliptic.P256()
			case "P-384":
				curve = elliptic.P384()
			case "P-521":
				curve = elliptic.P521()
			default:
				continue
			}
			x, err1 := base64.RawURLEncoding.DecodeString(k.X)
			y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
			if err1 != nil || err2 != nil {
				continue
			}
			keys[k.Kid] = &ecdsa.PublicKey{Curve: curve, X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
		}
	}
	if len(keys) == 0 {
		return fmt.Errorf("OIDC key set %s holds no RSA or EC signing key", v.jwksURI)
	}
	v.mu.Lock()
	v.keys, v.fetched = keys, time.Now()
	v.mu.Unlock()
	return nil
}

func (v *OIDCVerifier) key(ctx context.Context, kid string) (any, error) {
	v.mu.Lock()
	k, ok := v.keys[kid]
	stale := time.Since(v.fetched) > refetchAfter
	v.mu.Unlock()
	if ok {
		return k, nil
	}
	if stale {
		if err := v.refresh(ctx); err != nil {
			return nil, err
		}
		v.mu.Lock()
		k, ok = v.keys[kid]
		v.mu.Unlock()
		if ok {
			return k, nil
		}
	}
	return nil, fmt.Errorf("no key %q in the issuer's key set", kid)
}

// Verify accepts a token signed by the issuer for the audience and not expired.
func (v *OIDCVerifier) Verify(ctx context.Context, token string) error {
	_, err := jwt.Parse(token, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		return v.key(ctx, kid)
	},
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}),
		jwt.WithIssuer(v.issuer), jwt.WithAudience(v.audience), jwt.WithExpirationRequired(), jwt.WithLeeway(30*time.Second))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTokenRejected, err)
	}
	return nil
}
