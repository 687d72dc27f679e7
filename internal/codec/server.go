package codec

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"go.temporal.io/sdk/converter"
)

// Handler serves Temporal's remote codec HTTP API (POST /encode and /decode, as the Web UI and
// `temporal --codec-endpoint` call it) for requests that carry "Authorization: Bearer <token>".
// Browsers from the allowed origins get CORS headers, so the Web UI can call it.
func Handler(c *Codec, token string, origins []string) http.Handler {
	api := converter.NewPayloadCodecHTTPHandler(c)
	allowed := map[string]bool{}
	for _, o := range origins {
		allowed[strings.TrimRight(o, "/")] = true
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && allowed[origin] {
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
		if token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		api.ServeHTTP(w, r)
	})
}
