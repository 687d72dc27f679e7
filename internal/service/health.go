package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/discovery"
	"github.com/choria-temporal/provisioner/internal/health"
)

// How the components' health is watched: probed every HealthEvery, each probe bounded by
// HealthTimeout; a loop of ours that has not turned for its stall makes /healthz fail.
const (
	HealthEvery   = 2 * time.Second
	HealthTimeout = 5 * time.Second
	// WorkerStall: the worker's pollers start or end a poll at least every long poll (about a
	// minute), whether Temporal answers or not; none for this long is a worker that stopped
	WorkerStall = 5 * time.Minute
	// pollSettle: a long poll still open this long after it began was accepted by Temporal
	pollSettle = time.Second
)

// DiscoveryStall is how long discovery's loop may go without turning: it turns at least every
// 10 s between sweeps, and a sweep (which runs in the loop) is bounded by the interval.
func DiscoveryStall(interval time.Duration) time.Duration { return 2*interval + 5*time.Minute }

// serveHealth starts /healthz and /readyz when health_port is set: on a listener of their own,
// so that they answer whether or not Prometheus is enabled, and before anything is dialled (the
// components read "starting" until observed).
func (s *Service) serveHealth(ctx context.Context) error {
	if s.cfg.HealthPort <= 0 {
		return nil
	}
	addr, err := health.Serve(ctx, net.JoinHostPort(s.cfg.HealthAddress, strconv.Itoa(s.cfg.HealthPort)), s.Health)
	if err != nil {
		return err
	}
	s.HealthAddress = addr
	s.log.Info("health listening", zap.String("url", "http://"+addr+health.ReadyPath))
	return nil
}

// expectComponents registers what this process runs: Temporal and the broker always, discovery
// when it runs here. Their changes of state are logged with the reasons, which /readyz does not
// serve.
func (s *Service) expectComponents() {
	s.Health.LogChanges(s.log)
	s.Health.Expect(health.Temporal)
	s.Health.Expect(health.Broker)
	if s.opts.Discovery {
		s.Health.Expect(health.Discovery)
	}
}

// brokerWatch is up when every broker connection of the process is: the worker's shared RPC
// connection and discovery's. The worker's is dialled here if no request has dialled it yet, in
// the background: a dial holds the shared framework until the broker answers, and the probe must
// not hang on it (its loop is watched, and a broker outage is no reason to restart the process).
type brokerWatch struct {
	rpc  *activities.SharedFramework
	disc func() *discovery.Discoverer

	dialled atomic.Bool
	dialing atomic.Bool
	dialErr atomic.Pointer[string]
}

func (b *brokerWatch) probe(context.Context) error {
	var down []string
	if b.rpc != nil {
		switch {
		case b.dialled.Load():
			if !b.rpc.Connected() {
				down = append(down, "the worker's connection is down (reconnecting)")
			}
		default:
			if b.dialing.CompareAndSwap(false, true) {
				go b.dial()
			}
			why := "being dialled"
			if e := b.dialErr.Load(); e != nil {
				why = "not connected: " + *e
			}
			down = append(down, "the worker's connection is "+why)
		}
	}
	if d := b.disc(); d != nil && !d.Connected() {
		down = append(down, "discovery's connection is down (reconnecting)")
	}
	if len(down) > 0 {
		return errors.New(strings.Join(down, "; "))
	}
	return nil
}

func (b *brokerWatch) dial() {
	defer b.dialing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.rpc.NewConnector(ctx, b.rpc.MiddlewareServers, "provisioner-rpc", b.rpc.Logger("health")); err != nil {
		msg := err.Error()
		b.dialErr.Store(&msg)
		return
	}
	b.dialled.Store(true)
}

// pollWatch observes the worker's task queue polls on their way to Temporal (a gRPC interceptor):
// the worker polls when a poll is open that Temporal accepted, or the last one answered.
type pollWatch struct {
	turn func() // the worker's watchdog

	mu      sync.Mutex
	now     func() time.Time
	seq     uint64
	open    map[uint64]time.Time // polls in flight, by when they began
	lastOK  time.Time
	lastErr time.Time
	err     error
}

func newPollWatch(turn func()) *pollWatch {
	return &pollWatch{turn: turn, now: time.Now, open: map[uint64]time.Time{}}
}

func isPoll(method string) bool {
	return strings.HasSuffix(method, "/PollWorkflowTaskQueue") || strings.HasSuffix(method, "/PollActivityTaskQueue")
}

func (p *pollWatch) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !isPoll(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	p.mu.Lock()
	p.seq++
	id := p.seq
	p.open[id] = p.now()
	p.mu.Unlock()
	p.turn()
	err := invoker(ctx, method, req, reply, cc, opts...)
	p.mu.Lock()
	delete(p.open, id)
	if err != nil && ctx.Err() == nil {
		p.lastErr, p.err = p.now(), err
	} else if err == nil {
		p.lastOK = p.now()
	}
	p.mu.Unlock()
	p.turn()
	return err
}

// polling is nil while the worker polls Temporal, else why not.
func (p *pollWatch) polling(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if !p.lastOK.IsZero() && !p.lastOK.Before(p.lastErr) {
		return nil
	}
	for _, began := range p.open {
		if !began.Before(p.lastErr) && now.Sub(began) >= pollSettle {
			return nil
		}
	}
	if p.err != nil {
		return fmt.Errorf("the worker's polls fail: %w", p.err)
	}
	return errors.New("the worker has no poll open yet")
}
