package discovery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/internal/metrics"
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

func (c *sweepClock) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.at)
}

// The loop sweeps at start and then every interval; a sighting refused for rate brings the next
// sweep forward to resweep after the last one, so that a refused real host is found soon, and
// without refusals nothing sweeps early.
func TestRefusalBringsTheNextSweepForward(t *testing.T) {
	d, _ := newTestDiscovererWith(t, &recordingStarter{}, func(o *Options) { o.Interval, o.DisableEvents = time.Hour, true }, zap.NewNop())
	clock := &sweepClock{}
	d.sweep, d.resweep = clock.sweep, 100*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); assert.NoError(t, d.Run(ctx)) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool { return clock.count() == 1 }, time.Second, 5*time.Millisecond, "no sweep at start")
	time.Sleep(3 * d.resweep)
	require.Equal(t, 1, clock.count(), "swept early without a refusal")

	d.gate.refuse(metrics.RefusedRate, "", nil)
	require.Eventually(t, func() bool { return clock.count() == 2 }, 2*time.Second, 5*time.Millisecond, "a refusal did not bring the sweep forward")
	clock.mu.Lock()
	gap := clock.at[1].Sub(clock.at[0])
	clock.mu.Unlock()
	require.GreaterOrEqual(t, gap, d.resweep, "swept sooner than resweep after the last sweep")

	// a refusal only brings one sweep forward: the next is an interval later again
	time.Sleep(3 * d.resweep)
	require.Equal(t, 2, clock.count())
}

// With broadcasts disabled nothing sweeps, refusals or not.
func TestNoSweepWithBroadcastsDisabled(t *testing.T) {
	d, _ := newTestDiscovererWith(t, &recordingStarter{}, func(o *Options) { o.DisableEvents, o.DisableBroadcasts = true, true }, zap.NewNop())
	clock := &sweepClock{}
	d.sweep, d.resweep = clock.sweep, 10*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() { time.Sleep(50 * time.Millisecond); d.gate.refuse(metrics.RefusedRate, "", nil) }()
	require.NoError(t, d.Run(ctx))
	require.Zero(t, clock.count())
}
