package codec

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

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
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
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

	require.Equal(t, http.StatusOK, decode(browser, ui), "the UI's origin with the session")
	require.Equal(t, http.StatusUnauthorized, decode(browser, "http://evil.example"), "another origin with the session")
	require.Equal(t, http.StatusUnauthorized, decode(browser, ""), "no origin with the session")
	require.Equal(t, http.StatusUnauthorized, decode(&http.Client{}, ui), "the UI's origin without it")

	// a session of another token (another stack) is nothing here
	other := &http.Client{}
	req, _ := http.NewRequest(http.MethodPost, base+"/decode", bytes.NewReader(body))
	req.Header.Set("Origin", ui)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: session("an0ther-token-0123456789")})
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
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: session(token)})
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}
