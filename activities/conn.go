package activities

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/srvcache"
	log "github.com/sirupsen/logrus"
)

// SharedFramework makes go-choria's RPC clients send every request over one long-lived NATS
// connection per worker process.
//
// go-choria's generated clients take no connection: rpcclient builds a client/client per request,
// which dials the broker twice (a publisher and a receiver: TLS, JWT, subscription) and closes both
// when the request ends. Measured on the dev stack that was the largest share of the provisioner's
// CPU per host and 40–150 ms of latency per RPC (docs/performance.md). rpcclient gets its
// connections from the framework's NewConnector, so answering that with one shared connection is
// enough; every request still subscribes to its own unique reply subject on it.
type SharedFramework struct {
	inter.Framework

	mu   sync.Mutex
	conn *sharedConnector
	ctx  context.Context
	stop context.CancelFunc
}

// NewSharedFramework wraps fw; Close ends the shared connection.
func NewSharedFramework(fw inter.Framework) *SharedFramework {
	ctx, stop := context.WithCancel(context.Background())
	return &SharedFramework{Framework: fw, ctx: ctx, stop: stop}
}

// NewConnector returns the shared connection, dialling it on first use. The caller's context
// only bounds the first dial: the connection outlives every request.
func (f *SharedFramework) NewConnector(ctx context.Context, servers func() (srvcache.Servers, error), name string, logger *log.Entry) (inter.Connector, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn != nil {
		return f.conn, nil
	}
	if f.ctx.Err() != nil {
		return nil, fmt.Errorf("choria connection closed")
	}
	// go-choria's connector reconnects forever once connected, so a broker restart does not
	// need a new one; requests sent while it is away fail and their activities retry.
	c, err := f.Framework.NewConnector(f.ctx, servers, f.Framework.CallerID()+"-rpc", logger)
	if err != nil {
		return nil, err
	}
	f.conn = &sharedConnector{Connector: c}
	return f.conn, nil
}

// Close ends the shared connection.
func (f *SharedFramework) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stop()
	if f.conn != nil {
		f.conn.Connector.Close()
		f.conn = nil
	}
}

// sharedConnector is the shared connection as each request sees it: closing it is a no-op, and
// subscriptions get unique names, because go-choria keys a connection's subscriptions by name and
// every request calls its reply subscription "replies".
type sharedConnector struct {
	inter.Connector
	seq atomic.Uint64
}

func (c *sharedConnector) Close() {}

// replyBuffer is how many replies one request's subscription holds before NATS drops them: a
// request addressed to one host expects one.
const replyBuffer = 16

func (c *sharedConnector) QueueSubscribe(ctx context.Context, name string, subject string, group string, output chan inter.ConnectorMessage) error {
	// go-choria sizes the subscription's NATS channel like output, which its client makes with
	// room for 100,000 replies: 0.8 MB allocated and zeroed per request. A small channel in
	// between keeps that per in-flight RPC to a few hundred bytes.
	small := make(chan inter.ConnectorMessage, replyBuffer)
	go func() {
		for {
			select {
			case m := <-small:
				select {
				case output <- m:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	// go-choria's connector unsubscribes by this name when ctx ends, i.e. when the request is over
	return c.Connector.QueueSubscribe(ctx, fmt.Sprintf("%s-%d", name, c.seq.Add(1)), subject, group, small)
}
