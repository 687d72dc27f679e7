package codec

import (
	"bytes"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/converter"
)

// MaxBodyBytes is the largest request the codec server reads: Temporal refuses payloads over
// 2 MiB by default, which the remote codec API sends as base64 in JSON (4/3 as long), so a
// request of the Web UI or the CLI stays under it; larger ones are refused with 413 unread.
const MaxBodyBytes = 4 << 20

// ServerOptions say who the remote codec API answers.
type ServerOptions struct {
	// Token is the bearer token callers present ("Authorization: Bearer <token>").
	Token string
	// Origins are the Web UI origins (scheme://host:port) browsers may call from; they get CORS
	// headers and nothing else is granted to other origins.
	Origins []string
	// DevTrustOrigins serves browser requests from Origins without a token when they come from
	// a process of the codec server's own user on this host. The Web UI passes a token only when
	// it has a login (TEMPORAL_CODEC_PASS_ACCESS_TOKEN with OIDC), which the local dev stack has
	// not. Any process can send the UI's Origin header, so the header alone grants nothing: the
	// peer's socket must belong to this process's user (/proc/net/tcp), who can read the dev
	// stack's codec key file anyway, or to one of DevTrustUIDs. Serve refuses this on anything
	// but a loopback listener.
	DevTrustOrigins bool
	// DevTrustUIDs are the users whose processes DevTrustOrigins serves; empty: this process's
	// user. A codec server in a container (the compose stack) names the host user's browser.
	DevTrustUIDs []uint32
	// BrowserLogin serves a login page (LoginPath): a browser that presents the bearer token
	// there gets a session cookie, and requests from Origins that carry it are served as if they
	// carried the token. It is how a Web UI without a login of its own decodes (it sends cookies
	// with TEMPORAL_CODEC_INCLUDE_CREDENTIALS=true): the browser becomes a holder of the token,
	// so no one is served who could not have sent the token, whatever the listener. A session
	// lasts SessionTTL, ends at LogoutPath, and ends with the server.
	BrowserLogin bool
	// SessionTTL is how long a browser session lasts (0: DefaultSessionTTL).
	SessionTTL time.Duration
	// OIDC, when set, also accepts the bearer tokens a Web UI with a login passes
	// (TEMPORAL_CODEC_PASS_ACCESS_TOKEN): JWTs of the identity provider for the audience.
	OIDC *OIDCVerifier
	// TLS, when set, serves HTTPS (codec-server --tls-cert/--tls-key).
	TLS *tls.Config

	// peerUID finds the user of a loopback connection's other end (tests replace it).
	peerUID func(local, remote netip.AddrPort) (uint32, error)
	// now is the sessions' clock (tests move it)
	now func() time.Time
	// sessions are the browser sessions (Handler makes them with BrowserLogin)
	sessions *sessions
}

// Handler serves Temporal's remote codec HTTP API (POST /encode and /decode, as the Web UI and
// `temporal --codec-endpoint` call it) for requests that carry the bearer token or, with OIDC, an
// access token of the identity provider, and with DevTrustOrigins for browser requests from the
// allowed origins made by this user's processes. Browsers from the allowed origins get CORS
// headers, so the Web UI can call it. Bodies over MaxBodyBytes are refused (413).
//
// It decodes every payload of the codec's keys, whatever workflow it is bound to, and passes
// payloads that are not encrypted through: operators read what the history holds. /encode binds
// to no workflow, so what it encodes is refused by a worker wherever the SDK names the workflow.
func Handler(c *Codec, o ServerOptions) http.Handler {
	api := converter.NewPayloadCodecHTTPHandler(c)
	var login, logout http.Handler
	if o.BrowserLogin {
		o.sessions = newSessions(o.SessionTTL, o.now)
		login, logout = loginHandler(o, o.sessions), logoutHandler(o.sessions)
	}
	allowed := map[string]bool{}
	for _, origin := range o.Origins {
		allowed[strings.TrimRight(origin, "/")] = true
	}
	if o.peerUID == nil {
		o.peerUID = loopbackPeerUID
	}
	if len(o.DevTrustUIDs) == 0 {
		o.DevTrustUIDs = []uint32{uint32(os.Getuid())}
	}
	want := []byte("Bearer " + o.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case HealthPath:
			// for a container's health check: says nothing but that it serves
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "ok\n")
			return
		case LoginPath:
			if login != nil {
				login.ServeHTTP(w, r)
				return
			}
		case LogoutPath:
			if logout != nil {
				logout.ServeHTTP(w, r)
				return
			}
		}
		origin := r.Header.Get("Origin")
		known := origin != "" && allowed[origin]
		if known {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Credentials", "true")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Namespace")
			h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			h.Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK)
			return
		}
		if !o.authorized(r, want, known) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if !limitBody(w, r) {
			return
		}
		api.ServeHTTP(w, r)
	})
}

// authorized is true when the request carries the token, an access token of the OIDC issuer, a
// browser session (from a known origin), or comes from a trusted user's browser in dev-trust mode.
func (o ServerOptions) authorized(r *http.Request, want []byte, known bool) bool {
	auth := r.Header.Get("Authorization")
	if o.Token != "" && subtle.ConstantTimeCompare([]byte(auth), want) == 1 {
		return true
	}
	if bearer, found := strings.CutPrefix(auth, "Bearer "); found && bearer != "" && o.OIDC != nil && o.OIDC.Verify(r.Context(), bearer) == nil {
		return true
	}
	if o.BrowserLogin && known && validSession(r, o.sessions) {
		return true
	}
	return o.DevTrustOrigins && known && o.sameUser(r)
}

// sameUser is true when the request's connection comes from a process of a trusted user.
func (o ServerOptions) sameUser(r *http.Request) bool {
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	local, err1 := netip.ParseAddrPort(addrString(la))
	remote, err2 := netip.ParseAddrPort(r.RemoteAddr)
	if err1 != nil || err2 != nil || !remote.Addr().Unmap().IsLoopback() {
		return false
	}
	uid, err := o.peerUID(local, remote)
	return err == nil && slices.Contains(o.DevTrustUIDs, uid)
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// limitBody reads the body whole, at most MaxBodyBytes, and answers 413 to a larger one.
func limitBody(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > MaxBodyBytes {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return false
	}
	if r.Body == nil {
		return true
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return false
	case err != nil:
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return true
}
