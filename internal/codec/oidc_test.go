package codec

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// an identity provider on loopback TLS: discovery document and key set (one RSA, one EC key)
type fakeIDP struct {
	srv    *httptest.Server
	rsaKey *rsa.PrivateKey
	ecKey  *ecdsa.PrivateKey
}

func newFakeIDP(t *testing.T) *fakeIDP {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	p := &fakeIDP{rsaKey: rk, ecKey: ek}
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/keys"})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{
			{"kty": "RSA", "kid": "r1", "use": "sig", "n": b64(rk.N.Bytes()), "e": b64(big.NewInt(int64(rk.E)).Bytes())},
			{"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64(ek.X.FillBytes(make([]byte, 32))), "y": b64(ek.Y.FillBytes(make([]byte, 32)))},
		}})
	})
	p.srv = httptest.NewTLSServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeIDP) token(t *testing.T, method jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(method, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// A Web UI with a login passes its user's access token (TEMPORAL_CODEC_PASS_ACCESS_TOKEN): the
// codec server decodes for tokens the identity provider signed for its audience, and no others.
func TestOIDCAccessTokens(t *testing.T) {
	idp := newFakeIDP(t)
	v, err := NewOIDCVerifier(t.Context(), idp.srv.URL, "temporal-ui", idp.srv.Client())
	require.NoError(t, err)
	c, err := New(NewKey())
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(c, ServerOptions{Token: "s3cret-token-0123456789", OIDC: v}))
	defer srv.Close()
	enc, err := DataConverter(c).ToPayload("decoded for a logged-in user")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)
	post := func(bearer string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	now := time.Now()
	claims := func(aud, iss string, exp time.Time) jwt.MapClaims {
		return jwt.MapClaims{"iss": iss, "aud": aud, "sub": "alice", "exp": exp.Unix(), "iat": now.Unix()}
	}
	good := claims("temporal-ui", idp.srv.URL, now.Add(time.Hour))
	require.Equal(t, http.StatusOK, post(idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, good)), "RSA-signed token")
	require.Equal(t, http.StatusOK, post(idp.token(t, jwt.SigningMethodES256, "e1", idp.ecKey, good)), "EC-signed token")
	require.Equal(t, http.StatusOK, post("s3cret-token-0123456789"), "the static token still works")

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	for name, tok := range map[string]string{
		"another audience": idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, claims("someone-else", idp.srv.URL, now.Add(time.Hour))),
		"another issuer":   idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, claims("temporal-ui", "https://evil.example", now.Add(time.Hour))),
		"expired":          idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, claims("temporal-ui", idp.srv.URL, now.Add(-time.Hour))),
		"no expiry":        idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, jwt.MapClaims{"iss": idp.srv.URL, "aud": "temporal-ui"}),
		"unknown key":      idp.token(t, jwt.SigningMethodRS256, "r2", other, good),
		"key of another":   idp.token(t, jwt.SigningMethodRS256, "r1", other, good),
		"unsigned":         idp.token(t, jwt.SigningMethodNone, "r1", jwt.UnsafeAllowNoneSignatureType, good),
		"not a JWT":        "opaque-access-token",
	} {
		require.Equal(t, http.StatusUnauthorized, post(tok), name)
	}

	_, err = NewOIDCVerifier(t.Context(), idp.srv.URL, "", idp.srv.Client())
	require.Error(t, err, "an audience is required")
}
