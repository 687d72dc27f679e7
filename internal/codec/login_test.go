package codec

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// A Web UI without a login (the compose stack's) decodes through a browser session: the browser
// presents the token once at /login and then sends the cookie from the UI's origin. No one is
// served who does not hold the token, so the listener need not be a loopback one.
func TestBrowserLoginSessionStandsForTheToken(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	const ui, token = "http://localhost:8080", "s3cret-token-0123456789"
	addr, err := Serve(t.Context(), "0.0.0.0:0", c, ServerOptions{Token: token, Origins: []string{ui}, BrowserLogin: true})
	require.NoError(t, err, "any listener: the session is as good as the token, no better")
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	base := "http://127.0.0.1:" + port

	enc, err := DataConverter(c).ToPayload("decoded for the UI")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar, CheckRedirect: noRedirect}
	decode := func(cl *http.Client, origin string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Namespace", "default")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := cl.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, decode(browser, ui), "no session yet")

	// the form, then a wrong token: no cookie
	resp, err := browser.Get(base + LoginPath)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), `name="token"`)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "form-action 'self' "+ui, "the redirect after the post goes to the UI")
	resp, err = browser.PostForm(base+LoginPath, url.Values{"token": {"s3cret-token-0123456780"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Cookies())
	require.Equal(t, http.StatusUnauthorized, decode(browser, ui))

	// the token: a session cookie (not the token), back to the UI
	resp, err = browser.PostForm(base+LoginPath, url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, ui+"/", resp.Header.Get("Location"))
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	require.Equal(t, SessionCookie, cookies[0].Name)
	require.True(t, cookies[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)
	require.NotContains(t, cookies[0].Value, token)
	require.Equal(t, int(DefaultSessionTTL/time.Second), cookies[0].MaxAge, "the browser drops it when the server does")

	require.Equal(t, http.StatusOK, decode(browser, ui), "the UI's origin with the session")
	require.Equal(t, http.StatusUnauthorized, decode(browser, "http://evil.example"), "another origin with the session")
	require.Equal(t, http.StatusUnauthorized, decode(browser, ""), "no origin with the session")
	require.Equal(t, http.StatusUnauthorized, decode(&http.Client{}, ui), "the UI's origin without it")

	// a session of another token (another stack) is nothing here
	other := &http.Client{}
	req, _ := http.NewRequest(http.MethodPost, base+"/decode", bytes.NewReader(body))
	req.Header.Set("Origin", ui)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: strings.Repeat("A", len(cookies[0].Value))})
	resp, err = other.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// the health check needs nothing and says nothing
	resp, err = http.Get(base + HealthPath)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// Without BrowserLogin there is no login page and a cookie grants nothing.
func TestNoBrowserLoginWithoutTheSwitch(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	const ui, token = "http://localhost:8080", "s3cret-token-0123456789"
	addr, err := Serve(t.Context(), "127.0.0.1:0", c, ServerOptions{Token: token, Origins: []string{ui}})
	require.NoError(t, err)
	resp, err := http.PostForm("http://"+addr+LoginPath, url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Cookies())

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/decode", strings.NewReader(`{"payloads":[]}`))
	req.Header.Set("Origin", ui)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: strings.Repeat("A", 43)})
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// browserLogin is a codec server with BrowserLogin on o's token at a URL of httptest, with login
// (a session cookie for the token) and decode (the status of a decode from the UI's origin with
// a cookie).
type browserLogin struct {
	t    *testing.T
	base string
	body []byte
}

const loginUI = "http://localhost:8080"

func newBrowserLogin(t *testing.T, c *Codec, o ServerOptions) *browserLogin {
	o.BrowserLogin, o.Origins = true, []string{loginUI}
	srv := httptest.NewServer(Handler(c, o))
	t.Cleanup(srv.Close)
	enc, err := DataConverter(c).ToPayload("decoded for the UI")
	require.NoError(t, err)
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{enc}})
	require.NoError(t, err)
	return &browserLogin{t: t, base: srv.URL, body: body}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func (b *browserLogin) login(token string) *http.Cookie {
	b.t.Helper()
	resp, err := (&http.Client{CheckRedirect: noRedirect}).PostForm(b.base+LoginPath, url.Values{"token": {token}})
	require.NoError(b.t, err)
	resp.Body.Close()
	require.Equal(b.t, http.StatusSeeOther, resp.StatusCode)
	require.Len(b.t, resp.Cookies(), 1)
	return resp.Cookies()[0]
}

func (b *browserLogin) decode(cookie *http.Cookie) int {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.base+"/decode", bytes.NewReader(b.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", loginUI)
	req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A session lasts --session-ttl from its login, and not a moment longer, whatever the browser
// keeps: the cookie says when it ends and the server refuses it from then on.
func TestBrowserSessionExpires(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	const token = "s3cret-token-0123456789-0123456789"
	clock := &testClock{t: time.Unix(1_000_000, 0)}
	b := newBrowserLogin(t, c, ServerOptions{Token: token, SessionTTL: time.Hour, now: clock.now})
	cookie := b.login(token)
	require.Equal(t, 3600, cookie.MaxAge)
	require.True(t, cookie.Expires.Equal(clock.now().Add(time.Hour)), "expires %v", cookie.Expires)
	require.Equal(t, http.StatusOK, b.decode(cookie))
	clock.advance(time.Hour - time.Second)
	require.Equal(t, http.StatusOK, b.decode(cookie), "within its TTL")
	clock.advance(time.Second)
	require.Equal(t, http.StatusUnauthorized, b.decode(cookie), "expired")
	require.Equal(t, http.StatusOK, b.decode(b.login(token)), "a new login, a new session")
}

// /logout ends the session it is posted with: the server forgets it, so the same cookie (a copy
// kept elsewhere too) decodes nothing; another browser's session goes on.
func TestBrowserSessionLogout(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	const token = "s3cret-token-0123456789-0123456789"
	b := newBrowserLogin(t, c, ServerOptions{Token: token})
	mine, other := b.login(token), b.login(token)
	require.NotEqual(t, mine.Value, other.Value, "each login its own session")
	require.Equal(t, http.StatusOK, b.decode(mine))

	resp, err := http.Get(b.base + LogoutPath)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), `id="logout"`, "a GET is a form: following a link logs no one out")
	require.Equal(t, http.StatusOK, b.decode(mine))

	req, _ := http.NewRequest(http.MethodPost, b.base+LogoutPath, nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: mine.Value})
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	require.Negative(t, resp.Cookies()[0].MaxAge, "the browser drops the cookie")
	require.Equal(t, http.StatusUnauthorized, b.decode(mine), "the logged-out session")
	require.Equal(t, http.StatusOK, b.decode(other), "another session")
}

// Sessions are the server's, in memory: one from before a restart, with the same token or a
// new one, is nothing to the server that runs now.
func TestBrowserSessionsEndWithTheServerAndItsToken(t *testing.T) {
	c, err := New(NewKey())
	require.NoError(t, err)
	const token, newToken = "s3cret-token-0123456789-0123456789", "an0ther-token-0123456789-012345678"
	before := newBrowserLogin(t, c, ServerOptions{Token: token})
	cookie := before.login(token)
	require.Equal(t, http.StatusOK, before.decode(cookie))
	require.Equal(t, http.StatusUnauthorized, newBrowserLogin(t, c, ServerOptions{Token: newToken}).decode(cookie), "after a token change")
	require.Equal(t, http.StatusUnauthorized, newBrowserLogin(t, c, ServerOptions{Token: token}).decode(cookie), "after a restart, same token")
}

// The sessions held are bounded: past MaxSessions the expired ones go first, else the one that
// ends soonest; the newest is always held.
func TestSessionsBounded(t *testing.T) {
	clock := &testClock{t: time.Unix(1_000_000, 0)}
	s := newSessions(time.Hour, clock.now)
	s.max = 3
	first, _ := s.open()
	clock.advance(time.Minute)
	second, _ := s.open()
	third, _ := s.open()
	fourth, _ := s.open()
	require.Equal(t, 3, s.len())
	require.False(t, s.valid(first), "the one ending soonest made room")
	require.True(t, s.valid(second) && s.valid(third) && s.valid(fourth))

	clock.advance(time.Hour) // all expired
	fifth, _ := s.open()
	require.Equal(t, 1, s.len(), "the expired ones went first")
	require.True(t, s.valid(fifth))
	require.False(t, s.valid("not-a-session"))
	s.max = MaxSessions
	for range 10 * MaxSessions {
		s.open()
	}
	require.Equal(t, MaxSessions, s.len())
}
