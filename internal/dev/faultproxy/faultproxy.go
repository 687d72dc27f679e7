// Package faultproxy puts a TCP proxy between a client and a server on loopback and breaks the
// link on demand: cut it (both ways or one), slow it, or take it down. It embeds toxiproxy's
// proxy and toxics (github.com/Shopify/toxiproxy/v2) in the calling process, so the fault tests
// and the dev tooling need no daemon of their own; the product binary never links it.
package faultproxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// Direction is which way a fault acts on the link's bytes.
type Direction string

const (
	// Upstream is the client's bytes to the server: requests.
	Upstream Direction = "upstream"
	// Downstream is the server's bytes to the client: replies.
	Downstream Direction = "downstream"
	// Both is a fault each way.
	Both Direction = "both"
)

func (d Direction) streams() ([]string, error) {
	switch d {
	case Upstream, Downstream:
		return []string{string(d)}, nil
	case Both:
		return []string{string(Upstream), string(Downstream)}, nil
	}
	return nil, fmt.Errorf("direction %q: want upstream, downstream or both", d)
}

// Proxy is a TCP proxy listening on a loopback port of its own, forwarding each connection to
// Upstream.
type Proxy struct {
	Name     string
	Addr     string // host:port to point the client at
	Upstream string
	p        *toxiproxy.Proxy
	mu       sync.Mutex
	seq      int
}

// Start listens on a free loopback port and forwards to upstream (host:port). The upstream may
// come and go (a server restarted on the same port): each new connection dials it afresh.
func Start(name, upstream string) (*Proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("fault proxy %s: %w", name, err)
	}
	return &Proxy{Name: name, Addr: p.Listen, Upstream: upstream, p: p}, nil
}

// Stop closes the listener and every connection through it.
func (p *Proxy) Stop() { p.p.Stop() }

// Cut holds every byte in dir until heal is called: a partition as TCP sees it, where nothing
// arrives, the sender's buffers fill and it blocks, and no connection is closed by the network;
// what was held is delivered when the link heals (TCP's retransmissions), unless an end gave
// up on the connection meanwhile. New connections are accepted and held the same way, as a
// handshake that never completes. Upstream alone: requests are held and replies pass; Downstream
// alone: requests arrive and their replies are held.
func (p *Proxy) Cut(dir Direction) (heal func() error, err error) {
	return p.add(dir, holdType, nil)
}

// Slow delays every chunk in dir by latency ± jitter, keeping their order (a congested or far
// link), until undo.
func (p *Proxy) Slow(dir Direction, latency, jitter time.Duration) (undo func() error, err error) {
	return p.add(dir, "latency", map[string]any{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()})
}

// Down closes every connection and refuses new ones (a process that died on the far side, or a
// firewall that rejects) until up.
func (p *Proxy) Down() (up func() error) {
	p.p.Stop()
	return p.p.Start
}

func (p *Proxy) add(dir Direction, typ string, attrs map[string]any) (func() error, error) {
	streams, err := dir.streams()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for _, stream := range streams {
		p.seq++
		name := fmt.Sprintf("%s-%s-%d", typ, stream, p.seq)
		attrJSON := "{}"
		if attrs != nil {
			var parts []string
			for k, v := range attrs {
				parts = append(parts, fmt.Sprintf("%q:%v", k, v))
			}
			attrJSON = "{" + strings.Join(parts, ",") + "}"
		}
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrJSON)
		if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			for _, n := range names {
				_ = p.p.Toxics.RemoveToxic(context.Background(), n)
			}
			return nil, fmt.Errorf("fault proxy %s: %s %s: %w", p.Name, typ, stream, err)
		}
		names = append(names, name)
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			for _, n := range names {
				if rerr := p.p.Toxics.RemoveToxic(context.Background(), n); rerr != nil && err == nil {
					err = fmt.Errorf("fault proxy %s: removing %s: %w", p.Name, n, rerr)
				}
			}
		})
		return err
	}, nil
}

// holdType is the cut toxic: it reads nothing while it is in a link's chain, so toxiproxy's
// reader blocks and the sender's socket buffers fill, and when it is removed toxiproxy passes
// on what it held. toxiproxy's own "timeout" toxic reads and discards instead, which no network
// does to a TCP stream: what followed the gap would be garbage to the protocol.
const holdType = "faultproxy-hold"

type holdToxic struct{}

func (holdToxic) Pipe(stub *toxics.ToxicStub) { <-stub.Interrupt }

// toxiproxy finds toxics by name in its own registry, which only init can fill before any
// proxy exists (the registry's size sizes each link's chain).
func init() { toxics.Register(holdType, new(holdToxic)) }
