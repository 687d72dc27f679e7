package codec

import (
	"crypto/subtle"
	"html/template"
	"net/http"
	"strings"
	"time"
)

// Paths the codec server serves besides the remote codec API.
const (
	// LoginPath is where a browser presents the bearer token for a session (BrowserLogin).
	LoginPath = "/login"
	// LogoutPath ends the browser's session (BrowserLogin).
	LogoutPath = "/logout"
	// HealthPath answers 200 to anyone: a container's health check.
	HealthPath = "/healthz"
	// SessionCookie carries a browser's session: a random ID the server holds, never the token.
	SessionCookie = "choria_provisioner_codec"
	maxLoginBody  = 4 << 10
)

// validSession is true when the request carries the cookie of a session of s, not yet ended.
func validSession(r *http.Request, s *sessions) bool {
	c, err := r.Cookie(SessionCookie)
	return err == nil && s != nil && s.valid(c.Value)
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

var logoutPage = template.Must(template.New("logout").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Codec server logout</title></head>
<body>
{{if .Done}}<p id="done">Logged out: this browser decodes nothing until it logs in again (<a href="{{.Login}}">log in</a>).</p>
{{else}}<form method="post" action="{{.Action}}"><button type="submit" id="logout">Log out</button></form>{{end}}
</body></html>
`))

// pageHeaders are a login or logout page's: not cached, no script, no frame, forms posting to
// the codec server itself (and to formAction).
func pageHeaders(w http.ResponseWriter, formAction string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; form-action "+formAction+"; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
}

// loginHandler serves LoginPath: the form on GET, and on POST a session cookie for the right
// token, then back to the Web UI (the first origin). The cookie is HttpOnly and SameSite=Strict:
// the UI's page cannot read it, and the browser sends it only on requests of the same site
// (http://localhost:8080 calling http://localhost:8081), never on another site's.
//
// The session is one of s: it ends when its TTL has passed, at LogoutPath, or when the server
// stops (a new token takes a restart); the cookie expires with it.
func loginHandler(o ServerOptions, s *sessions) http.Handler {
	back, formAction := "/", "'self'"
	if len(o.Origins) > 0 {
		origin := strings.TrimRight(o.Origins[0], "/")
		// form-action holds for the redirect after the post too: the UI's origin is its target
		back, formAction = origin+"/", "'self' "+origin
	}
	want := []byte(o.Token)
	form := func(w http.ResponseWriter, status int, failed bool) {
		pageHeaders(w, formAction)
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
			value, end := s.open()
			http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: value, Path: "/", Expires: end, MaxAge: int(s.ttl / time.Second),
				HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, back, http.StatusSeeOther)
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}

// logoutHandler serves LogoutPath: a form on GET, and on POST the end of the request's session
// (the server forgets it, so a copy of the cookie is worth nothing either) and of its cookie.
// A cross-site form cannot log a browser out: SameSite=Strict keeps the cookie off its post.
func logoutHandler(s *sessions) http.Handler {
	page := func(w http.ResponseWriter, done bool) {
		pageHeaders(w, "'self'")
		_ = logoutPage.Execute(w, struct {
			Action, Login string
			Done          bool
		}{LogoutPath, LoginPath, done})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			page(w, false)
		case http.MethodPost:
			if c, err := r.Cookie(SessionCookie); err == nil {
				s.close(c.Value)
			}
			http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
				HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			page(w, true)
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}
