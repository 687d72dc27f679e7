package codec

import (
	"crypto/subtle"
	"crypto/tls"
	"net/http"
	"strings"

	"go.temporal.io/sdk/converter"
)

// ServerOptions say who the remote codec API answers.
type ServerOptions struct {
	// Token is the bearer token callers present ("Authorization: Bearer <token>").
	Token string
	// Origins are the Web UI origins (scheme://host:port) browsers may call from; they get CORS
	// headers and nothing else is granted to other origins.
	Origins []string
	// DevTrustOrigins serves browser requests from Origins without a token. The Web UI passes a
	// token only when it has a login (TEMPORAL_CODEC_PASS_ACCESS_TOKEN with OIDC), which the local
	// dev stack has not; Serve refuses this on anything but a loopback listener.
	DevTrustOrigins bool
	// OIDC, when set, also accepts the bearer tokens a Web UI with a login passes
	// (TEMPORAL_CODEC_PASS_ACCESS_TOKEN): JWTs of the identity provider for the audience.
	OIDC *OIDCVerifier
	// TLS, when set, serves HTTPS (codec-server --tls-cert/--tls-key).
	TLS *tls.Config
}

// Handler serves Temporal's remote codec HTTP API (POST /encode and /decode, as the Web UI and
// `temporal --codec-endpoint` call it) for requests that carry the bearer token or, with OIDC, an
// access token of the identity provider, and with DevTrustOrigins for browser requests from the
// allowed origins. Browsers from the allowed
// origins get CORS headers, so the Web UI can call it.
func Handler(c *Codec, o ServerOptions) http.Handler {
	api := converter.NewPayloadCodecHTTPHandler(c)
	allowed := map[string]bool{}
	for _, origin := range o.Origins {
		allowed[strings.TrimRight(origin, "/")] = true
	}
	want := []byte("Bearer " + o.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		auth := r.Header.Get("Authorization")
		ok := o.Token != "" && subtle.ConstantTimeCompare([]byte(auth), want) == 1
		if !ok && o.OIDC != nil {
			if bearer, found := strings.CutPrefix(auth, "Bearer "); found && bearer != "" {
				ok = o.OIDC.Verify(r.Context(), bearer) == nil
			}
		}
		if !ok && !(o.DevTrustOrigins && known) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		api.ServeHTTP(w, r)
	})
}
