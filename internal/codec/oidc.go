package codec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// ErrTokenRejected is returned for a bearer token the identity provider did not sign for us, or
// that lacks the required claim.
var ErrTokenRejected = errors.New("access token rejected")

// ErrOIDCOptions is returned for OIDC options the codec server refuses to start with.
var ErrOIDCOptions = errors.New("codec server OIDC")

// DefaultKeyRefetchInterval is how often, at most, the issuer's key set is fetched: a token
// naming a key the cached set lacks (the provider rotated its keys, or a caller made the kid up)
// asks for it again, and no more often than this.
const DefaultKeyRefetchInterval = 30 * time.Second

// OIDCOptions say which access tokens a Web UI with a login passes (TEMPORAL_CODEC_PASS_ACCESS_TOKEN)
// the codec server accepts: JWTs of Issuer for Audience, not expired, whose Claim holds one of
// Values.
type OIDCOptions struct {
	Issuer, Audience string
	// Claim names the claim that grants decoding, e.g. "groups" or "roles"; a claim nested in an
	// object is named by its path, e.g. "realm_access.roles" (Keycloak's realm roles). Its value
	// is a string or a list of strings, one of which must be in Values.
	Claim  string
	Values []string
	// AnyUser accepts every user the issuer gives a token for the audience, with no claim
	// required: every such user can then decrypt every payload. It must be asked for; neither a
	// claim nor AnyUser is refused.
	AnyUser bool
	// KeyRefetchInterval bounds the key set's fetches (0: DefaultKeyRefetchInterval).
	KeyRefetchInterval time.Duration
	// Client fetches the discovery document and the key set (nil: a client with a 10 s timeout).
	Client *http.Client

	now func() time.Time // tests move the clock
}

// OIDCVerifier checks access tokens with github.com/coreos/go-oidc: the issuer's discovery
// document and key set, the token's signature, issuer, audience and expiry; then the claim.
type OIDCVerifier struct {
	verifier *oidc.IDTokenVerifier
	claim    string
	values   []string
	anyUser  bool
}

func (o *OIDCOptions) check() error {
	switch {
	case o.Issuer == "" || o.Audience == "":
		return fmt.Errorf("%w: an issuer and an audience are both required", ErrOIDCOptions)
	case o.AnyUser && (o.Claim != "" || len(o.Values) > 0):
		return fmt.Errorf("%w: a required claim and accepting any user contradict each other: choose one", ErrOIDCOptions)
	case o.AnyUser:
	case o.Claim == "" && len(o.Values) == 0:
		return fmt.Errorf("%w: name the claim that grants decoding and its values (--oidc-claim groups --oidc-claim-value temporal-operators), "+
			"or accept every user of the issuer with a token for the audience explicitly (--oidc-any-user)", ErrOIDCOptions)
	case o.Claim == "":
		return fmt.Errorf("%w: claim values %v need the claim that holds them (--oidc-claim)", ErrOIDCOptions, o.Values)
	case len(o.Values) == 0:
		return fmt.Errorf("%w: claim %q needs the values that grant decoding (--oidc-claim-value)", ErrOIDCOptions, o.Claim)
	}
	if o.KeyRefetchInterval < 0 {
		return fmt.Errorf("%w: the key set refetch interval %s is negative", ErrOIDCOptions, o.KeyRefetchInterval)
	}
	return nil
}

// NewOIDCVerifier reads the issuer's discovery document and its key set.
func NewOIDCVerifier(ctx context.Context, o OIDCOptions) (*OIDCVerifier, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.KeyRefetchInterval == 0 {
		o.KeyRefetchInterval = DefaultKeyRefetchInterval
	}
	if o.now == nil {
		o.now = time.Now
	}
	client := &http.Client{Timeout: 10 * time.Second}
	if o.Client != nil {
		c := *o.Client
		client = &c
	}
	next := client.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	timeout := client.Timeout
	if timeout <= 0 {
		timeout = defaultFetchTimeout
	}
	client.Transport = &fetchLimiter{next: next, interval: o.KeyRefetchInterval, timeout: timeout, now: o.now,
		last: map[string]*fetched{}, flying: map[string]*flight{}}
	// go-oidc keeps the context for its key set fetches, which go through the limiter
	ctx = oidc.ClientContext(context.WithoutCancel(ctx), client)
	provider, err := oidc.NewProvider(ctx, o.Issuer)
	if err != nil {
		return nil, fmt.Errorf("OIDC discovery of %s: %w", o.Issuer, err)
	}
	var disc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := provider.Claims(&disc); err != nil || disc.JWKSURI == "" {
		return nil, fmt.Errorf("OIDC discovery names no jwks_uri")
	}
	if err := fetchKeySet(ctx, client, disc.JWKSURI); err != nil {
		return nil, err
	}
	keys := oidc.NewRemoteKeySet(ctx, disc.JWKSURI)
	primeKeySet(ctx, keys)
	return &OIDCVerifier{
		verifier: oidc.NewVerifier(o.Issuer, keys, &oidc.Config{ClientID: o.Audience,
			SupportedSigningAlgs: []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.ES256, oidc.ES384, oidc.ES512},
			Now:                  o.now}),
		claim: o.Claim, values: o.Values, anyUser: o.AnyUser,
	}, nil
}

// fetchKeySet reads the key set once at start, so an issuer whose keys cannot be read is found
// before the first user is; the limiter keeps the answer for primeKeySet.
func fetchKeySet(ctx context.Context, client *http.Client, jwksURI string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, jwksURI, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("OIDC key set: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("OIDC key set %s: %s", jwksURI, resp.Status)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil || len(set.Keys) == 0 {
		return fmt.Errorf("OIDC key set %s holds no key", jwksURI)
	}
	return nil
}

// unsignedProbe is a JWS without a key ID or a valid signature: verifying it makes go-oidc read
// the key set (it has none cached) and fail, which is all it is for.
const unsignedProbe = "eyJhbGciOiJSUzI1NiJ9.e30.AA"

// primeKeySet fills go-oidc's cache of the key set now, from the limiter's answer to
// fetchKeySet (no second request). go-oidc caches keys only as a verification fetches them,
// and a token whose key is cached is verified without waiting on any fetch; without this the
// first tokens after start, valid ones included, would wait on a refetch a made-up key ID began.
func primeKeySet(ctx context.Context, keys *oidc.RemoteKeySet) {
	_, _ = keys.VerifySignature(ctx, unsignedProbe)
}

// Verify accepts a token signed by the issuer for the audience, not expired, whose claim holds
// one of the values.
func (v *OIDCVerifier) Verify(ctx context.Context, token string) error {
	t, err := v.verifier.Verify(ctx, token)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTokenRejected, err)
	}
	if v.anyUser {
		return nil
	}
	var claims map[string]any
	if err := t.Claims(&claims); err != nil {
		return fmt.Errorf("%w: %v", ErrTokenRejected, err)
	}
	if !slices.ContainsFunc(claimStrings(claims, v.claim), func(s string) bool { return slices.Contains(v.values, s) }) {
		return fmt.Errorf("%w: claim %s holds none of %v", ErrTokenRejected, v.claim, v.values)
	}
	return nil
}

// claimStrings is the string or strings of the claim named name: a top-level claim of that
// name (which may hold dots, as a URL-named claim does), else the path its dots separate.
func claimStrings(claims map[string]any, name string) []string {
	val, ok := claims[name]
	if !ok {
		var cur any = claims
		for _, part := range strings.Split(name, ".") {
			m, isMap := cur.(map[string]any)
			if !isMap {
				return nil
			}
			cur = m[part]
		}
		val = cur
	}
	switch x := val.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// fetchLimiter lets a GET of one URL through at most once per interval and answers the others
// in between with the last answer (or its error). go-oidc fetches the key set again for every
// token naming a key it does not hold, coalescing only fetches at the same moment: without
// this, tokens with made-up key IDs would make the codec server hammer the identity provider.
//
// The lock guards the limiter's state only, never a fetch: a URL's fetch runs once (the callers
// that find it in flight wait on it), each caller waits with its own request's context, and
// the answers of other URLs, or of this URL within the interval, never wait on it.
type fetchLimiter struct {
	next     http.RoundTripper
	interval time.Duration
	timeout  time.Duration // of one fetch, which no caller's context ends
	now      func() time.Time

	mu     sync.Mutex
	last   map[string]*fetched
	flying map[string]*flight
}

type fetched struct {
	at     time.Time
	status int
	header http.Header
	body   []byte
	err    error
}

// flight is a fetch in progress: done is closed once f is set.
type flight struct {
	done chan struct{}
	f    *fetched
}

// maxFetchBytes bounds a discovery document or key set read into memory.
const maxFetchBytes = 1 << 20

// defaultFetchTimeout bounds one fetch when the client has no timeout of its own.
const defaultFetchTimeout = 10 * time.Second

func (l *fetchLimiter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return l.next.RoundTrip(req)
	}
	url := req.URL.String()
	l.mu.Lock()
	if f, ok := l.last[url]; ok && l.now().Sub(f.at) < l.interval {
		l.mu.Unlock()
		return f.response(req)
	}
	fl, ok := l.flying[url]
	if !ok {
		fl = &flight{done: make(chan struct{})}
		l.flying[url] = fl
		go l.fetch(url, req, fl)
	}
	l.mu.Unlock()
	select {
	case <-fl.done:
		return fl.f.response(req)
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

// fetch is the one fetch of url in flight: bounded by the limiter's timeout, not by the context
// of the request that began it, whose caller may give up while others still wait.
func (l *fetchLimiter) fetch(url string, req *http.Request, fl *flight) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), l.timeout)
	defer cancel()
	f := &fetched{at: l.now()}
	resp, err := l.next.RoundTrip(req.Clone(ctx))
	if err == nil {
		f.status, f.header = resp.StatusCode, resp.Header
		f.body, err = io.ReadAll(io.LimitReader(resp.Body, maxFetchBytes))
		resp.Body.Close()
	}
	f.err = err
	l.mu.Lock()
	l.last[url] = f
	delete(l.flying, url)
	l.mu.Unlock()
	fl.f = f
	close(fl.done)
}

// response is a copy of the answer for req, or its error.
func (f *fetched) response(req *http.Request) (*http.Response, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &http.Response{StatusCode: f.status, Status: fmt.Sprintf("%d %s", f.status, http.StatusText(f.status)), Header: f.header.Clone(),
		Body: io.NopCloser(bytes.NewReader(f.body)), ContentLength: int64(len(f.body)), Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}
