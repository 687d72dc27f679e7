package discovery

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/lifecycle"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/metrics"
)

// Discoverer turns sightings into workflows.
type Discoverer struct {
	fw      inter.Framework
	starter Starter
	opts    Options
	metrics *metrics.Metrics
	log     *zap.Logger
	now     func() time.Time
	recheck time.Duration // the time between looks, FinishingRecheck; tests shorten it
	// conn is the startup events' connection, which sweeps reuse (one at a time): a sweep of
	// its own connected four times before it could publish
	conn   inter.Connector
	connMu sync.Mutex
	// queued counts the startup events waiting for a goroutine (eagerStart)
	queued atomic.Int64
	// unjudgedUntil (Unix ns): after a look at a run Temporal did not answer, the checks until
	// then are unjudged without asking, so that a partition costs a sweep one timeout per
	// CheckTimeout instead of one a sighting (judge.go)
	unjudgedUntil atomic.Int64
	gate          *gate    // the new-hosts rate and the refusals' count (gate.go)
	settle        *settler // sightings waiting for a finishing run to close (settle.go)
	// unreadableLogged (Unix ns) is when discovery last logged that the pause state is unreadable,
	// 0 while it is readable: once per interval, however many sightings ask
	unreadableLogged atomic.Int64
	// missed says the last sweep did not run (paused, or the pause state unreadable) or failed:
	// the loop sweeps again at the first pause check that finds provisioning running, instead of
	// an interval later
	missed atomic.Bool
	// stale asks the loop for a sweep RefusedSweepAfter the last one, after a sighting was dropped
	// as stale (judge.go)
	stale chan struct{}
	// sweep is Sweep, resweep RefusedSweepAfter and pauseEvery PauseCheckEvery: tests replace them
	sweep      func(context.Context) (int, error)
	resweep    time.Duration
	pauseEvery time.Duration
}

// New makes a Discoverer over a Choria client framework on the provisioning collective.
func New(fw inter.Framework, starter Starter, opts Options, m *metrics.Metrics, log *zap.Logger) *Discoverer {
	if opts.StartConcurrency <= 0 {
		opts.StartConcurrency = 16
	}
	if opts.DiscoveryTimeout <= 0 {
		opts.DiscoveryTimeout = 2 * time.Second
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Minute
	}
	d := &Discoverer{fw: fw, starter: starter, opts: opts, metrics: m, log: log, now: time.Now, recheck: FinishingRecheck}
	d.gate = newGate(opts.NewHostsRate, opts.NewHostsBurst, m, log)
	d.settle = newSettler(SettleQueueSize)
	d.sweep, d.resweep, d.pauseEvery = d.Sweep, RefusedSweepAfter, PauseCheckEvery
	d.stale = make(chan struct{}, 1)
	return d
}

// Connected is whether discovery's broker connection (startup events and sweeps) is up: false
// before Run has connected, and while go-choria reconnects it. Without events (DisableEvents)
// discovery keeps no connection, and nothing is down.
func (d *Discoverer) Connected() bool {
	if d.opts.DisableEvents {
		return true
	}
	d.connMu.Lock()
	defer d.connMu.Unlock()
	return d.conn != nil && d.conn.IsConnected()
}

// Run listens for startup events and sweeps at start and every interval, until ctx ends.
func (d *Discoverer) Run(ctx context.Context) error {
	if !d.opts.DisableEvents {
		stop, err := d.listen(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	d.loop(ctx)
	return nil
}

// loop sweeps at start, every interval from the last sweep's start, RefusedSweepAfter the last
// sweep's end when a sighting was refused for rate since or dropped as stale, and at the first
// pause check that finds provisioning running after a sweep that missed (paused, unreadable or
// failed); between sweeps it keeps the paused gauge current and summarises the refusals once an
// interval. Stale sightings bring forward at most one sweep between two others: in a long burst
// every sweep sees echoes of hosts just restarted, and would otherwise sweep every 10 s.
func (d *Discoverer) loop(ctx context.Context) {
	pause := time.NewTicker(d.pauseEvery)
	defer pause.Stop()
	report := time.NewTicker(d.opts.Interval)
	defer report.Stop()
	next := time.NewTimer(0)
	defer next.Stop()
	if d.opts.DisableBroadcasts {
		next.Stop()
	}
	due, ended := time.Now(), time.Time{}
	staleDue, staleSpent := false, false // the next sweep is brought forward for stale sightings; one was
	for {
		if d.opts.Turn != nil {
			d.opts.Turn()
		}
		select {
		case <-ctx.Done():
			d.gate.report()
			return
		case <-pause.C:
			if !d.paused(ctx) && d.missed.Load() && !d.opts.DisableBroadcasts {
				due = time.Now()
				next.Reset(0)
			}
		case <-report.C:
			d.gate.report()
		case <-d.gate.resweep:
			if early := ended.Add(d.resweep); !d.opts.DisableBroadcasts && early.Before(due) {
				due = early
				next.Reset(time.Until(due))
			}
		case <-d.stale:
			if early := ended.Add(d.resweep); !staleSpent && !d.opts.DisableBroadcasts && early.Before(due) {
				due, staleDue, staleSpent = early, true, true
				next.Reset(time.Until(due))
			}
		case <-next.C:
			began := time.Now()
			if _, err := d.sweep(ctx); err != nil && ctx.Err() == nil {
				d.log.Error("discovery sweep failed", zap.Error(err))
			}
			ended, due = time.Now(), began.Add(d.opts.Interval)
			staleSpent, staleDue = staleSpent && staleDue, false
			next.Reset(time.Until(due))
		}
	}
}

// announce publishes the provisioner's startup lifecycle event, as the Choria Provisioner does.
func (d *Discoverer) announce(conn inter.RawNATSConnector) {
	ev, err := lifecycle.New(lifecycle.Startup, lifecycle.Identity(d.fw.Configuration().Identity),
		lifecycle.Component(ProvisionerComponent), lifecycle.Version(d.opts.Version))
	if err == nil {
		err = lifecycle.PublishEvent(ev, conn)
	}
	if err != nil {
		d.log.Warn("could not publish the startup event", zap.Error(err))
	}
}

// paused reports the fleet-wide pause state and mirrors it in the paused and control_unreadable
// gauges. When the state cannot be read, or the control workflow is not the provisioner's, the
// fleet is taken as paused (fail closed: a pause an operator made must not lapse because Temporal
// or a squatter hides it); that is logged once per interval, and exported for as long as it lasts.
func (d *Discoverer) paused(ctx context.Context) bool {
	if d.opts.Pause == nil {
		return false
	}
	p, err := d.opts.Pause.Paused(ctx)
	unreadable := 0.0
	if err != nil {
		p, unreadable = true, 1
		now, last := d.now().UnixNano(), d.unreadableLogged.Load()
		if (last == 0 || time.Duration(now-last) >= d.opts.Interval) && d.unreadableLogged.CompareAndSwap(last, now) {
			d.log.Error("the fleet-wide pause state cannot be read: taking provisioning as paused, no host is started", zap.Error(err))
		}
	} else {
		d.unreadableLogged.Store(0)
	}
	v := 0.0
	if p {
		v = 1
	}
	d.metrics.Paused.WithLabelValues(d.metrics.Site).Set(v)
	d.metrics.ControlUnreadable.WithLabelValues(d.metrics.Site).Set(unreadable)
	return p
}
