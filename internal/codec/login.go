package codec

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"html/template"
	"net/http"
	"strings"
)

// Paths the codec server serves besides the remote codec API.
const (
	// LoginPath is where a browser presents the bearer token for a session (BrowserLogin).
	LoginPath = "/login"
	// HealthPath answers 200 to anyone: a container's health check.
	HealthPath = "/healthz"
	// SessionCookie carries a browser's session: a MAC of the token, never the token itself.
	SessionCookie = "choria_provisioner_codec"
	maxLoginBody  = 4 << 10
)

// session is the cookie value that stands for token: a keyed hash, so the cookie jar does not
// hold the token the CLI presents, and a new token (a new stack) voids every session of the old.
func session(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("choria-provisioner codec-server browser session"))
	return hex.EncodeToString(m.Sum(nil))
}

func validSession(r *http.Request, token string) bool {
	c, err := r.Cookie(SessionCookie)
	if err != nil || token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(c.Value), []byte(session(token))) == 1
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Codec server login</title></head>
<body>
<h1>Decode payloads in this browser</h1>
<p>Paste the codec server's token (the file its <code>--token-file</code> names; in the compose stack:
<code>docker compose exec codec-server cat /site/codec-server.token</code>).</p>
{{if .Failed}}<p id="failed"><strong>That is not the token.</strong></p>{{end}}
<form method="post" action="{{.Action}}">
<input type="password" name="token" id="token" autocomplete="off" autofocus required>
<button type="submit" id="login">Log in</button>
</form>
</body></html>
`))

// loginHandler serves LoginPath: the form on GET, and on POST a session cookie for the right
// token, then back to the Web UI (the first origin). The cookie is HttpOnly and SameSite=Strict:
// the UI's page cannot read it, and the browser sends it only on requests of the same site
// (http://localhost:8080 calling http://localhost:8081), never on another site's.
func loginHandler(o ServerOptions) http.Handler {
	back, formAction := "/", "'self'"
	if len(o.Origins) > 0 {
		origin := strings.TrimRight(o.Origins[0], "/")
		// form-action holds for the redirect after the post too: the UI's origin is its target
		back, formAction = origin+"/", "'self' "+origin
	}
	csp := "default-src 'none'; form-action " + formAction + "; frame-ancestors 'none'"
	want := []byte(o.Token)
	form := func(w http.ResponseWriter, status int, failed bool) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// no script, no frame: the page is a form that posts to itself
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		w.WriteHeader(status)
		_ = loginPage.Execute(w, struct {
			Action string
			Failed bool
		}{LoginPath, failed})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			form(w, http.StatusOK, false)
		case http.MethodPost:
			r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
			if err := r.ParseForm(); err != nil {
				http.Error(w, "bad form", http.StatusBadRequest)
				return
			}
			got := []byte(strings.TrimSpace(r.PostForm.Get("token")))
			if len(want) == 0 || subtle.ConstantTimeCompare(got, want) != 1 {
				form(w, http.StatusUnauthorized, true)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: session(o.Token), Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, back, http.StatusSeeOther)
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}
