package discovery

import (
	"context"
	"math"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/choria-temporal/provisioner/common/metrics"
)

// gate holds the new-hosts rate that startup events and sweeps share, and counts what is
// refused. Every sighting it admits may cost Temporal a run, and a forged one a run's reads of a
// host that never answers: the rate bounds what a flood of forged startup events or discovery
// replies can cost, whatever its size.
type gate struct {
	limiter *rate.Limiter
	metrics *metrics.Metrics
	log     *zap.Logger
	// resweep asks for a sweep sooner after a refusal for rate (loop)
	resweep chan struct{}

	mu       sync.Mutex
	refused  map[string]int // since the last report, by reason
	detailed int            // refusals logged one by one since the last report
	dropped  func() (int, error)
	dropSeen int // the NATS client's drops at the last report
}

// detailedRefusals is how many refusals an interval logs one by one, with what was wrong; the
// rest are in the interval's summary: a flood of bad events must not become a flood of log lines.
const detailedRefusals = 20

func newGate(perSecond float64, burst int, m *metrics.Metrics, log *zap.Logger) *gate {
	l := rate.NewLimiter(rate.Inf, 0)
	if perSecond > 0 && !math.IsInf(perSecond, 1) {
		l = rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))
	}
	return &gate{limiter: l, metrics: m, log: log, resweep: make(chan struct{}, 1), refused: map[string]int{}}
}

// admit takes the new-hosts rate's token for a startup event now, or refuses it.
func (g *gate) admit() bool {
	if g.limiter.Allow() {
		return true
	}
	g.refuse(metrics.RefusedRate, "", nil)
	return false
}

// await waits for a token for a sweep's sighting until deadline, or refuses it: a sweep paces
// its handover instead of refusing at once, so that the hosts of a burst larger than the burst
// size are handed over in one sweep at the rate. A wait that cannot end by the deadline is
// refused at once and takes no token.
func (g *gate) await(ctx context.Context, deadline time.Time) bool {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if g.limiter.Wait(wctx) == nil {
		return true
	}
	if ctx.Err() == nil {
		g.refuse(metrics.RefusedRate, "", nil)
	}
	return false
}

// refuse counts one refused sighting; err, when set, says what was wrong with it and is logged
// with msg while the interval's budget of detailed lines lasts.
func (g *gate) refuse(reason, msg string, err error) {
	g.metrics.SightingsRefused.WithLabelValues(g.metrics.Site, reason).Inc()
	g.mu.Lock()
	g.refused[reason]++
	detail := err != nil && g.detailed < detailedRefusals
	if detail {
		g.detailed++
	}
	g.mu.Unlock()
	if reason == metrics.RefusedRate || reason == metrics.RefusedFull || reason == metrics.RefusedUnjudged {
		nudge(g.resweep)
	}
	if detail {
		g.log.Warn(msg, zap.String("reason", reason), zap.Error(err))
	}
}

// nudge asks the loop, through one of its one-slot channels, for a sweep sooner; a request
// already waiting there stands for this one.
func nudge(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// watch counts, from now on, the messages the NATS client dropped from its own buffer.
func (g *gate) watch(dropped func() (int, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropped, g.dropSeen = dropped, 0
}

// report logs what was refused since the last report, if anything, and starts a new interval.
func (g *gate) report() {
	g.mu.Lock()
	refused := g.refused
	g.refused, g.detailed = map[string]int{}, 0
	if g.dropped != nil {
		if n, err := g.dropped(); err == nil && n > g.dropSeen {
			refused[metrics.RefusedFull] += n - g.dropSeen
			g.metrics.SightingsRefused.WithLabelValues(g.metrics.Site, metrics.RefusedFull).Add(float64(n - g.dropSeen))
			g.dropSeen = n
		}
	}
	g.mu.Unlock()
	total := 0
	for _, n := range refused {
		total += n
	}
	if total == 0 {
		return
	}
	g.log.Warn("sightings refused since the last report; a real host among them still waits in provisioning mode and is found again by the next discovery sweep",
		zap.Int("refused", total), zap.Int(metrics.RefusedRate, refused[metrics.RefusedRate]), zap.Int(metrics.RefusedSize, refused[metrics.RefusedSize]),
		zap.Int(metrics.RefusedInvalid, refused[metrics.RefusedInvalid]), zap.Int(metrics.RefusedFull, refused[metrics.RefusedFull]),
		zap.Int(metrics.RefusedUnjudged, refused[metrics.RefusedUnjudged]))
}
