package codec

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// an identity provider on loopback TLS: discovery document and key set (an RSA and an EC key
// at first; rotate adds one), counting the key set's fetches
type fakeIDP struct {
	srv     *httptest.Server
	rsaKey  *rsa.PrivateKey
	ecKey   *ecdsa.PrivateKey
	fetches atomic.Int64
	hold    atomic.Pointer[hold]

	mu   sync.Mutex
	keys []map[string]string
}

// hold keeps the key set's fetches waiting from the moment one arrives until release.
type hold struct {
	arrived, release chan struct{}
	once, freed      sync.Once
}

func (h *hold) free() { h.freed.Do(func() { close(h.release) }) }

// holdKeys makes the provider slow: its key set answers once the test frees the hold.
func (p *fakeIDP) holdKeys(t *testing.T) *hold {
	h := &hold{arrived: make(chan struct{}), release: make(chan struct{})}
	p.hold.Store(h)
	t.Cleanup(h.free) // before the server closes: it waits for its handlers
	return h
}

// within fails the test unless ch delivers within a bound far above what a request takes: a
// wait that does not end is the failure, not a slow machine.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting", what)
	}
	var zero T
	return zero
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func ecJWK(kid string, k *ecdsa.PrivateKey) map[string]string {
	return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(k.X.FillBytes(make([]byte, 32))), "y": b64(k.Y.FillBytes(make([]byte, 32)))}
}

func newFakeIDP(t *testing.T) *fakeIDP {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	p := &fakeIDP{rsaKey: rk, ecKey: newECKey(t)}
	p.keys = []map[string]string{
		{"kty": "RSA", "kid": "r1", "use": "sig", "n": b64(rk.N.Bytes()), "e": b64(big.NewInt(int64(rk.E)).Bytes())},
		ecJWK("e1", p.ecKey),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/keys"})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		p.fetches.Add(1)
		if h := p.hold.Load(); h != nil {
			h.once.Do(func() { close(h.arrived) })
			<-h.release
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": p.keys})
	})
	p.srv = httptest.NewTLSServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func newECKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

// rotate publishes another EC key under kid, as a provider rotating its keys does.
func (p *fakeIDP) rotate(kid string, k *ecdsa.PrivateKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, ecJWK(kid, k))
}

func (p *fakeIDP) token(t *testing.T, method jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(method, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// claims are a token's of idp for aud, expiring at exp, with extra claims added.
func (p *fakeIDP) claims(aud, iss string, exp time.Time, extra jwt.MapClaims) jwt.MapClaims {
	c := jwt.MapClaims{"iss": iss, "aud": aud, "sub": "alice", "exp": exp.Unix(), "iat": time.Now().Unix()}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

func (p *fakeIDP) options() OIDCOptions {
	return OIDCOptions{Issuer: p.srv.URL, Audience: "temporal-ui", Client: p.srv.Client(), Claim: "groups", Values: []string{"temporal-operators", "sre"}}
}

// decodeServer is a codec server accepting o's tokens; post sends a decode request with bearer.
func decodeServer(t *testing.T, v *OIDCVerifier) func(bearer string) int {
	c, err := New(NewKey())
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(c, ServerOptions{Token: "s3cret-token-0123456789-0123456789", OIDC: v}))
	t.Cleanup(srv.Close)
	enc, err := DataConverter(c).ToPayload("decoded for a logged-in user")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)
	return func(bearer string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
}

// A Web UI with a login passes its user's access token (TEMPORAL_CODEC_PASS_ACCESS_TOKEN): the
// codec server decodes for tokens the identity provider signed for its audience whose required
// claim holds an allowed value, and no others.
func TestOIDCAccessTokens(t *testing.T) {
	idp := newFakeIDP(t)
	v, err := NewOIDCVerifier(t.Context(), idp.options())
	require.NoError(t, err)
	post := decodeServer(t, v)
	now := time.Now()
	member := jwt.MapClaims{"groups": []string{"developers", "temporal-operators"}}
	good := idp.claims("temporal-ui", idp.srv.URL, now.Add(time.Hour), member)
	require.Equal(t, http.StatusOK, post(idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, good)), "RSA-signed token")
	require.Equal(t, http.StatusOK, post(idp.token(t, jwt.SigningMethodES256, "e1", idp.ecKey, good)), "EC-signed token")
	require.Equal(t, http.StatusOK, post(idp.token(t, jwt.SigningMethodES256, "e1", idp.ecKey,
		idp.claims("temporal-ui", idp.srv.URL, now.Add(time.Hour), jwt.MapClaims{"groups": "sre"}))), "a claim of one string")
	require.Equal(t, http.StatusOK, post("s3cret-token-0123456789-0123456789"), "the static token still works")

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	for name, tok := range map[string]string{
		"no required claim":   idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, idp.claims("temporal-ui", idp.srv.URL, now.Add(time.Hour), nil)),
		"no allowed value":    idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, idp.claims("temporal-ui", idp.srv.URL, now.Add(time.Hour), jwt.MapClaims{"groups": []string{"developers"}})),
		"the value elsewhere": idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, idp.claims("temporal-ui", idp.srv.URL, now.Add(time.Hour), jwt.MapClaims{"roles": []string{"temporal-operators"}})),
		"another audience":    idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, idp.claims("someone-else", idp.srv.URL, now.Add(time.Hour), member)),
		"another issuer":      idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, idp.claims("temporal-ui", "https://evil.example", now.Add(time.Hour), member)),
		"expired":             idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, idp.claims("temporal-ui", idp.srv.URL, now.Add(-time.Hour), member)),
		"no expiry":           idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, jwt.MapClaims{"iss": idp.srv.URL, "aud": "temporal-ui", "groups": []string{"sre"}}),
		"unknown key":         idp.token(t, jwt.SigningMethodRS256, "r2", other, good),
		"key of another":      idp.token(t, jwt.SigningMethodRS256, "r1", other, good),
		"unsigned":            idp.token(t, jwt.SigningMethodNone, "r1", jwt.UnsafeAllowNoneSignatureType, good),
		"HMAC with the kid":   idp.token(t, jwt.SigningMethodHS256, "r1", []byte("guessed"), good),
		"not a JWT":           "opaque-access-token",
	} {
		require.Equal(t, http.StatusUnauthorized, post(tok), name)
	}
}

// A claim nested in an object is named by its path; a claim whose name holds dots (a URL, as
// Auth0 names them) by its name.
func TestOIDCClaimPaths(t *testing.T) {
	claims := map[string]any{
		"realm_access":                  map[string]any{"roles": []any{"offline", "temporal-operators"}},
		"https://example.net/groups":    []any{"sre"},
		"single":                        "one",
		"not strings":                   []any{1, true},
		"https://example.net/role.name": "x",
	}
	require.Equal(t, []string{"offline", "temporal-operators"}, claimStrings(claims, "realm_access.roles"))
	require.Equal(t, []string{"sre"}, claimStrings(claims, "https://example.net/groups"))
	require.Equal(t, []string{"one"}, claimStrings(claims, "single"))
	require.Empty(t, claimStrings(claims, "not strings"))
	require.Empty(t, claimStrings(claims, "realm_access.missing"))
	require.Empty(t, claimStrings(claims, "single.deeper"))
}

// Without a required claim the codec server does not start, unless every user of the issuer
// is accepted explicitly; contradictory or half options are refused too.
func TestOIDCOptionsRefused(t *testing.T) {
	idp := newFakeIDP(t)
	for name, change := range map[string]func(o *OIDCOptions){
		"no claim":                 func(o *OIDCOptions) { o.Claim, o.Values = "", nil },
		"a claim without values":   func(o *OIDCOptions) { o.Values = nil },
		"values without the claim": func(o *OIDCOptions) { o.Claim = "" },
		"a claim and any user":     func(o *OIDCOptions) { o.AnyUser = true },
		"no audience":              func(o *OIDCOptions) { o.Audience = "" },
		"a negative interval":      func(o *OIDCOptions) { o.KeyRefetchInterval = -time.Second },
	} {
		o := idp.options()
		change(&o)
		_, err := NewOIDCVerifier(t.Context(), o)
		require.ErrorIs(t, err, ErrOIDCOptions, name)
	}
	o := idp.options()
	o.Claim, o.Values = "", nil
	_, err := NewOIDCVerifier(t.Context(), o)
	require.ErrorContains(t, err, "--oidc-any-user", "the message names the opt-out")

	// opted out: any user of the issuer with a token for the audience
	o.AnyUser = true
	v, err := NewOIDCVerifier(t.Context(), o)
	require.NoError(t, err)
	post := decodeServer(t, v)
	require.Equal(t, http.StatusOK, post(idp.token(t, jwt.SigningMethodES256, "e1", idp.ecKey, idp.claims("temporal-ui", idp.srv.URL, time.Now().Add(time.Hour), nil))))

	// an issuer whose key set cannot be read is found at start
	o = idp.options()
	o.Issuer = idp.srv.URL + "/nowhere"
	_, err = NewOIDCVerifier(t.Context(), o)
	require.ErrorContains(t, err, "OIDC discovery")
}

// Tokens naming keys the issuer does not have fetch its key set at most once per interval,
// however many there are; a key the provider rotated in is found after the interval.
func TestOIDCKeySetFetchesRateLimited(t *testing.T) {
	idp := newFakeIDP(t)
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); clock = clock.Add(d) }
	o := idp.options()
	o.KeyRefetchInterval = time.Minute
	o.now = now
	v, err := NewOIDCVerifier(t.Context(), o)
	require.NoError(t, err)
	require.EqualValues(t, 1, idp.fetches.Load(), "the key set is read at start")
	post := decodeServer(t, v)
	member := jwt.MapClaims{"groups": []string{"sre"}}

	// 1,000 requests with made-up key IDs, 20 at once
	forged := newECKey(t)
	flood := func() {
		var wg sync.WaitGroup
		var unauthorized atomic.Int64
		for w := 0; w < 20; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					tok := idp.token(t, jwt.SigningMethodES256, fmt.Sprintf("forged-%d-%d", w, i), forged,
						idp.claims("temporal-ui", idp.srv.URL, time.Now().Add(time.Hour), member))
					if post(tok) == http.StatusUnauthorized {
						unauthorized.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 1000, unauthorized.Load())
	}
	flood()
	require.EqualValues(t, 1, idp.fetches.Load(), "1,000 unknown key IDs within the interval fetch nothing more")

	// the provider rotates a key in: found once the interval has passed, with one fetch
	rotated := newECKey(t)
	idp.rotate("e2", rotated)
	tok := idp.token(t, jwt.SigningMethodES256, "e2", rotated, idp.claims("temporal-ui", idp.srv.URL, time.Now().Add(time.Hour), member))
	require.Equal(t, http.StatusUnauthorized, post(tok), "within the interval the cached set answers")
	advance(time.Minute)
	require.Equal(t, http.StatusOK, post(tok), "after the interval the key set is fetched again")
	require.EqualValues(t, 2, idp.fetches.Load())
	flood()
	require.EqualValues(t, 2, idp.fetches.Load(), "and again at most one fetch in the next interval")
	require.Equal(t, http.StatusOK, post(idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey,
		idp.claims("temporal-ui", idp.srv.URL, time.Now().Add(time.Hour), member))), "the known keys still verify")
}

// A slow identity provider stalls no one but those who need its answer: while a refetch (a
// token naming a key the cached set lacks) waits on it, a token of a key already held verifies
// at once, including the first tokens after start.
func TestOIDCKnownKeyDoesNotWaitOnARefetch(t *testing.T) {
	idp := newFakeIDP(t)
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	o := idp.options()
	o.KeyRefetchInterval = time.Minute
	o.now = now
	v, err := NewOIDCVerifier(t.Context(), o)
	require.NoError(t, err)
	post := decodeServer(t, v)
	member := jwt.MapClaims{"groups": []string{"sre"}}
	mu.Lock()
	clock = clock.Add(time.Minute) // the next unknown key ID fetches the set again
	mu.Unlock()

	h := idp.holdKeys(t)
	forged := newECKey(t)
	unknown := make(chan int, 1)
	go func() {
		unknown <- post(idp.token(t, jwt.SigningMethodES256, "not-yet-published", forged, idp.claims("temporal-ui", idp.srv.URL, time.Now().Add(time.Hour), member)))
	}()
	within(t, h.arrived, "the refetch never reached the provider")

	known := make(chan int, 1)
	go func() {
		known <- post(idp.token(t, jwt.SigningMethodRS256, "r1", idp.rsaKey, idp.claims("temporal-ui", idp.srv.URL, time.Now().Add(time.Hour), member)))
	}()
	require.Equal(t, http.StatusOK, within(t, known, "a token of a known key waits on the refetch"))

	h.free()
	require.Equal(t, http.StatusUnauthorized, within(t, unknown, "the unknown key's token after the refetch"))
	require.EqualValues(t, 2, idp.fetches.Load(), "the start's fetch and the one refetch")
}

// The limiter's lock is never held across a fetch: another URL is answered, and a caller that
// gives up stops waiting, while a fetch is held; the callers of the URL in flight share its one
// fetch.
func TestFetchLimiterHoldsNoLockAcrossAFetch(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var once, freed sync.Once
	free := func() { freed.Do(func() { close(release) }) }
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" {
			fetches.Add(1)
			once.Do(func() { close(arrived) })
			<-release
		}
		_, _ = w.Write([]byte(r.URL.Path))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(free)
	client := &http.Client{Transport: &fetchLimiter{next: http.DefaultTransport, interval: time.Minute, timeout: 10 * time.Second,
		now: time.Now, last: map[string]*fetched{}, flying: map[string]*flight{}}}
	type answer struct {
		body string
		err  error
	}
	get := func(ctx context.Context, path string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				ch <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			ch <- answer{string(b), err}
		}()
		return ch
	}

	first := get(context.Background(), "/keys")
	within(t, arrived, "the fetch never reached the server")
	other := within(t, get(context.Background(), "/other"), "another URL waits on the held fetch")
	require.NoError(t, other.err)
	require.Equal(t, "/other", other.body)

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := get(ctx, "/keys")
	cancel()
	require.ErrorIs(t, within(t, gaveUp, "a caller whose context ended still waits").err, context.Canceled)

	second := get(context.Background(), "/keys")
	free()
	for _, ch := range []<-chan answer{first, second} {
		a := within(t, ch, "the fetch's answer")
		require.NoError(t, a.err)
		require.Equal(t, "/keys", a.body)
	}
	require.EqualValues(t, 1, fetches.Load(), "one fetch for every caller of the interval")
}
