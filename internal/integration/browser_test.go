package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// browser is one headless Debian chromium driven over the DevTools protocol (chromedp), for
// pages that need a click (the Web UI's Queries tab) as well as a look.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// newBrowser starts chromium with this machine's closed-network flags; it stops with the test.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	require.NoError(t, err, "the Web UI tests need Debian's chromium: apt-get install chromium (make deps)")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1800),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")), "starting chromium")
	return &browser{t: t, ctx: ctx}
}

// open loads url and waits until an element matching ready (XPath or CSS, as chromedp searches)
// is visible.
func (b *browser) open(url, ready string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(ready)), "%s: waiting for %s", url, ready)
}

// waitFor waits until an element matching sel is visible on the current page.
func (b *browser) waitFor(sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, chromedp.WaitVisible(sel)), "waiting for %s", sel)
}

func (b *browser) click(sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, chromedp.Click(sel)), "clicking %s", sel)
}

// store sets a key of the current page's origin's localStorage, as the page itself would.
func (b *browser) store(key, value string) {
	b.t.Helper()
	js, err := json.Marshal(map[string]string{"k": key, "v": value})
	require.NoError(b.t, err)
	_, err = chromedp.Run(b.ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(o => { localStorage.setItem(o.k, o.v); return true })(%s)`, js)))
	require.NoError(b.t, err, "setting localStorage %s", key)
}

// textOf is what the first element matching sel shows.
func (b *browser) textOf(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	require.NoError(b.t, err, "reading %s", sel)
	return s
}

// text is what the page shows a reader; html is its DOM.
func (b *browser) text() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text("body"))
	require.NoError(b.t, err)
	return s
}

func (b *browser) html() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.OuterHTML("html"))
	require.NoError(b.t, err)
	return s
}

// shot saves the viewport as PNG.
func (b *browser) shot(file string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(file, png, 0o644))
}

// waitText waits until the page shows want and returns what it shows.
func (b *browser) waitText(want string) string {
	b.t.Helper()
	var s string
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		s, err = chromedp.Run(b.ctx, chromedp.Text("body"))
		if err == nil && strings.Contains(s, want) {
			return s
		}
		if time.Now().After(deadline) {
			require.Failf(b.t, "page text", "the page never showed %q; it shows:\n%s", want, s)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
