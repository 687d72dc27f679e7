package discovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/choria-temporal/provisioner/common/metrics"
)

// sweepClock records when the loop swept.
type sweepClock struct {
	mu sync.Mutex
	at []time.Time
}

func (c *sweepClock) sweep(context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	return 0, nil
}

// runDiscoverer runs d until the returned function is called, which waits for it to end.
func runDiscoverer(t *testing.T, d *Discoverer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); assert.NoError(t, d.Run(ctx)) }()
	return func() { cancel(); <-done }
}

func (c *sweepClock) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

// gaps is the time between each sweep and the one before.
func (c *sweepClock) gaps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(c.at); i++ {
		out = append(out, c.at[i].Sub(c.at[i-1]))
	}
	return out
}

// The loop's tests run in a synctest bubble: its clock is the bubble's, which moves only when
// every goroutine of the bubble is blocked, so time.Sleep there takes no wall time and
// synctest.Wait is the moment the loop has done all it had to by then. A check that nothing
// swept is exact, not a wall-clock bet on a machine fast enough.

// The loop sweeps at start and then every interval; a sighting refused for rate brings the next
// sweep forward to resweep after the last one, so that a refused real host is found soon, and
// without refusals nothing sweeps early.
func TestRefusalBringsTheNextSweepForward(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := newTestDiscovererWith(t, &recordingStarter{}, func(o *Options) { o.Interval, o.DisableEvents = time.Hour, true }, zap.NewNop())
		clock := &sweepClock{}
		d.sweep = clock.sweep
		defer runDiscoverer(t, d)()

		synctest.Wait()
		require.Equal(t, 1, clock.count(), "no sweep at start")
		time.Sleep(3 * d.resweep)
		synctest.Wait()
		require.Equal(t, 1, clock.count(), "swept early without a refusal")

		// long after the last sweep, a refusal sweeps at once
		d.gate.refuse(metrics.RefusedRate, "", nil)
		synctest.Wait()
		require.Equal(t, 2, clock.count(), "a refusal did not bring the sweep forward")

		// right after one, resweep after it and not sooner
		d.gate.refuse(metrics.RefusedRate, "", nil)
		time.Sleep(d.resweep - time.Millisecond)
		synctest.Wait()
		require.Equal(t, 2, clock.count(), "swept sooner than resweep after the last sweep")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, 3, clock.count())

		// a refusal only brings one sweep forward: the next is an interval later again
		time.Sleep(d.opts.Interval - time.Millisecond)
		synctest.Wait()
		require.Equal(t, 3, clock.count())
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, 4, clock.count())
		require.Equal(t, []time.Duration{3 * d.resweep, d.resweep, d.opts.Interval}, clock.gaps())
	})
}

// With broadcasts disabled nothing sweeps, refusals or not.
func TestNoSweepWithBroadcastsDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := newTestDiscovererWith(t, &recordingStarter{}, func(o *Options) { o.DisableEvents, o.DisableBroadcasts = true, true }, zap.NewNop())
		clock := &sweepClock{}
		d.sweep = clock.sweep
		defer runDiscoverer(t, d)()
		d.gate.refuse(metrics.RefusedRate, "", nil)
		d.dropStale("echo.example")
		time.Sleep(2 * d.opts.Interval) // past a resweep and an interval
		synctest.Wait()
		require.Empty(t, d.gate.resweep, "the loop took the refusal")
		require.Empty(t, d.stale, "the loop took the stale sighting")
		require.Zero(t, clock.count())
	})
}

// pauseState is a PauseChecker that answers what it is told.
type pauseState struct {
	mu     sync.Mutex
	paused bool
	err    error
}

func (p *pauseState) Paused(context.Context) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.err
}

// When the pause state cannot be read (or the control workflow is a squatter's), discovery takes
// the fleet as paused, whatever the checker says beside its error: no host is started, the
// gauges say so, and a burst of sightings logs it once.
func TestUnreadablePauseStateHoldsNewHosts(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	starter := &recordingStarter{}
	state := &pauseState{err: errors.New("the control state cannot be read: squatted")}
	d, m := newTestDiscovererWith(t, starter, func(o *Options) { o.Pause = state }, zap.New(core))
	for i := range 5 {
		d.handleEvent(context.Background(), fmt.Sprintf("n%d.example", i), time.Now())
	}
	starter.mu.Lock()
	require.Empty(t, starter.calls, "a host was started while the pause state was unreadable")
	starter.mu.Unlock()
	require.Equal(t, 1, logs.FilterMessageSnippet("cannot be read").Len())
	require.Equal(t, 1.0, testutil.ToFloat64(m.ControlUnreadable.WithLabelValues("lab")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Paused.WithLabelValues("lab")))

	state.mu.Lock()
	state.err = nil
	state.mu.Unlock()
	d.handleEvent(context.Background(), "n9.example", time.Now())
	require.Zero(t, testutil.ToFloat64(m.ControlUnreadable.WithLabelValues("lab")))
	require.Zero(t, testutil.ToFloat64(m.Paused.WithLabelValues("lab")))
	require.Eventually(t, func() bool { starter.mu.Lock(); defer starter.mu.Unlock(); return len(starter.calls) == 1 }, 10*time.Second, 10*time.Millisecond)
}

// A sweep skipped while paused (or while the pause state was unreadable) runs again at the first
// pause check that finds provisioning running, not an interval later; a sweep that ran is not
// repeated by the checks.
func TestMissedSweepRunsWhenProvisioningRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		state := &pauseState{err: errors.New("the first read is under way")}
		d, _ := newTestDiscovererWith(t, &recordingStarter{}, func(o *Options) { o.Interval, o.DisableEvents, o.Pause = time.Hour, true, state }, zap.NewNop())
		clock := &sweepClock{}
		d.sweep = func(ctx context.Context) (int, error) {
			clock.sweep(ctx)
			if d.paused(ctx) {
				return d.Sweep(ctx) // returns before it needs a broker
			}
			d.missed.Store(false) // what a sweep that ran leaves
			return 0, nil
		}
		defer runDiscoverer(t, d)()

		synctest.Wait()
		require.Equal(t, 1, clock.count(), "no sweep at start")
		time.Sleep(4 * d.pauseEvery)
		synctest.Wait()
		require.Equal(t, 1, clock.count(), "swept again while the pause state was unreadable")
		require.True(t, d.missed.Load())

		state.mu.Lock()
		state.err, state.paused = nil, true
		state.mu.Unlock()
		time.Sleep(4 * d.pauseEvery)
		synctest.Wait()
		require.Equal(t, 1, clock.count(), "swept again while paused")

		// running again: the next check sweeps; that sweep ran, so the checks after it do not
		state.mu.Lock()
		state.paused = false
		state.mu.Unlock()
		time.Sleep(d.pauseEvery)
		synctest.Wait()
		require.Equal(t, 2, clock.count(), "the missed sweep did not run at the first check that found provisioning running")
		time.Sleep(4 * d.pauseEvery)
		synctest.Wait()
		require.Equal(t, 2, clock.count())
	})
}

// A stale sighting brings the next sweep forward, but at most one sweep between two others: in a
// long burst every sweep sees echoes of hosts just restarted, and must not sweep every resweep.
func TestStaleSightingsBringForwardOneSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _ := newTestDiscovererWith(t, &recordingStarter{}, func(o *Options) { o.Interval, o.DisableEvents = time.Minute, true }, zap.NewNop())
		clock := &sweepClock{}
		d.sweep = func(ctx context.Context) (int, error) {
			d.dropStale("echo.example") // every sweep sees an echo
			return clock.sweep(ctx)
		}
		defer runDiscoverer(t, d)()

		every, soon := d.opts.Interval, d.resweep
		time.Sleep(2*every + 3*soon + soon/2)
		synctest.Wait()
		// at 0, soon, every+soon, every+2*soon, 2*every+2*soon, 2*every+3*soon: two sweeps an
		// interval, not one every resweep
		require.Equal(t, []time.Duration{soon, every, soon, every, soon}, clock.gaps(), "stale sightings brought every sweep forward")
	})
}
