package faultproxy

import (
	"bufio"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/testnet"
)

// echoServer answers every line with the same line and counts the lines it received.
func echoServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var got atomic.Int64
	testnet.Serve(t, l, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			got.Add(1)
			if _, err := c.Write([]byte(line)); err != nil {
				return
			}
		}
	})
	return l.Addr().String(), &got
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

func (c *client) send(t *testing.T, s string) {
	t.Helper()
	_, err := c.c.Write([]byte(s + "\n"))
	require.NoError(t, err)
}

// reply reads one line, or "" when none came within d.
func (c *client) reply(d time.Duration) string {
	_ = c.c.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadString('\n')
	if err != nil {
		return ""
	}
	return line
}

// proxied is an echo server behind a proxy and a client dialled through it, as every test
// starts.
func proxied(t *testing.T) (*Proxy, *client, *atomic.Int64) {
	t.Helper()
	addr, got := echoServer(t)
	p, err := Start("echo", addr)
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	return p, dial(t, p.Addr), got
}

// echoes sends s and requires it back within five seconds.
func (c *client) echoes(t *testing.T, s string) {
	t.Helper()
	c.send(t, s)
	require.Equal(t, s+"\n", c.reply(5*time.Second))
}

func TestProxyForwards(t *testing.T) {
	_, c, got := proxied(t)
	c.echoes(t, "hello")
	require.EqualValues(t, 1, got.Load())
}

// Replies cut: the request reaches the server, its reply is held, and arrives when the link
// heals (held, not dropped: the stream stays whole).
func TestCutDownstreamHoldsReplies(t *testing.T) {
	p, c, got := proxied(t)
	c.echoes(t, "before")

	heal, err := p.Cut(Downstream)
	require.NoError(t, err)
	c.send(t, "during")
	require.Eventually(t, func() bool { return got.Load() == 2 }, 5*time.Second, 10*time.Millisecond, "the request arrives")
	require.Empty(t, c.reply(300*time.Millisecond), "its reply does not")
	require.NoError(t, heal())
	require.Equal(t, "during\n", c.reply(5*time.Second), "the held reply arrives once healed")
	c.echoes(t, "after")
}

// Both ways cut: nothing arrives either way, on the open connection or a new one.
func TestCutBothHoldsEverything(t *testing.T) {
	p, c, got := proxied(t)
	heal, err := p.Cut(Both)
	require.NoError(t, err)
	c.send(t, "held")
	fresh := dial(t, p.Addr)
	fresh.send(t, "fresh")
	require.Empty(t, c.reply(300*time.Millisecond))
	require.Empty(t, fresh.reply(10*time.Millisecond))
	require.Zero(t, got.Load(), "no request reached the server")
	require.NoError(t, heal())
	require.Equal(t, "held\n", c.reply(5*time.Second))
	require.Equal(t, "fresh\n", fresh.reply(5*time.Second))
	require.NoError(t, heal(), "healing twice is harmless")
}

func TestSlowDelaysReplies(t *testing.T) {
	p, c, _ := proxied(t)
	undo, err := p.Slow(Downstream, 300*time.Millisecond, 100*time.Millisecond)
	require.NoError(t, err)
	began := time.Now()
	c.echoes(t, "slow")
	require.GreaterOrEqual(t, time.Since(began), 200*time.Millisecond, "at least latency - jitter")
	require.NoError(t, undo())
}

func TestDownRefusesUntilUp(t *testing.T) {
	p, c, _ := proxied(t)
	up := p.Down()
	_, err := c.c.Read(make([]byte, 1))
	require.Error(t, err, "the open connection is closed")
	_, err = net.DialTimeout("tcp", p.Addr, time.Second)
	require.Error(t, err, "a new one is refused")
	require.NoError(t, up())
	c = dial(t, p.Addr)
	c.echoes(t, "back")
}

func TestBadDirection(t *testing.T) {
	p, err := Start("echo", "127.0.0.1:1")
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	_, err = p.Cut("sideways")
	require.ErrorContains(t, err, `direction "sideways"`)
}
