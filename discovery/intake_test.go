package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/choria-temporal/provisioner/common/metrics"
)

func refused(m *metrics.Metrics, reason string) float64 {
	return testutil.ToFloat64(m.SightingsRefused.WithLabelValues("lab", reason))
}

// oversizedStartup is a well-formed startup event of a valid identity, padded past MaxEventSize.
func oversizedStartup(t *testing.T, identity string) []byte {
	t.Helper()
	var ev map[string]any
	require.NoError(t, json.Unmarshal(startupEvent(t, identity, "provision_mode_server"), &ev))
	ev["version"] = strings.Repeat("9", MaxEventSize)
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	return b
}

// A message larger than discovery reads is refused before anything is queued, and so is one that
// is not a startup event of a valid identity; each is counted by its reason, and only a good
// event reaches the queue.
func TestIntakeChecksBeforeAnythingIsQueued(t *testing.T) {
	d, m := newTestDiscoverer(t, &recordingStarter{})
	queue := make(chan sighting, 10)
	d.receive(queue, oversizedStartup(t, "big.example"))
	require.Empty(t, queue, "an oversized event reached the queue")
	require.Equal(t, 1.0, refused(m, metrics.RefusedSize))

	d.receive(queue, []byte("not an event"))
	d.receive(queue, startupEvent(t, "wild.*", "provision_mode_server"))
	require.Empty(t, queue)
	require.Equal(t, 2.0, refused(m, metrics.RefusedInvalid))

	d.receive(queue, startupEvent(t, "n1.example", "provision_mode_server"))
	require.Len(t, queue, 1)
	s := <-queue
	require.Equal(t, "n1.example", s.identity)
	require.EqualValues(t, 1, d.queued.Load())

	// a full queue refuses, counted, instead of blocking the NATS client's goroutine
	full := make(chan sighting)
	d.receive(full, startupEvent(t, "n2.example", "provision_mode_server"))
	require.Equal(t, 1.0, refused(m, metrics.RefusedFull))
	require.Zero(t, refused(m, metrics.RefusedRate))
}

// Startup events with new identities beyond the burst are refused at once (rate), counted, and
// ask for a sweep sooner; within the burst they become runs.
func TestNewHostsRateRefusesEventsBeyondTheBurst(t *testing.T) {
	s := &recordingStarter{}
	d, m := newTestDiscovererWith(t, s, func(o *Options) { o.NewHostsRate, o.NewHostsBurst = 0.001, 3 }, zap.NewNop())
	for i := range 10 {
		d.HandleEvent(context.Background(), startupEvent(t, fmt.Sprintf("forged-%d.example", i), "provision_mode_server"))
	}
	require.Equal(t, 3, s.started())
	require.Equal(t, 7.0, refused(m, metrics.RefusedRate))
	select {
	case <-d.gate.resweep:
	default:
		t.Fatal("a refusal for rate did not ask for an earlier sweep")
	}
	// an invalid event takes no token: it is refused for what it is
	d.HandleEvent(context.Background(), []byte("{}"))
	require.Equal(t, 1.0, refused(m, metrics.RefusedInvalid))
	require.Equal(t, 7.0, refused(m, metrics.RefusedRate))

	// 0 is unlimited
	s = &recordingStarter{}
	d, m = newTestDiscovererWith(t, s, nil, zap.NewNop())
	for i := range 1000 {
		d.HandleEvent(context.Background(), startupEvent(t, fmt.Sprintf("n%d.example", i), "provision_mode_server"))
	}
	require.Equal(t, 1000, s.started())
	require.Zero(t, refused(m, metrics.RefusedRate))
}

// A sweep paces its handover at the rate, sharing the bucket with the events: a sighting waits
// for its token while one can come before the handover window closes, and is refused (and
// starts nothing, describes nothing) once none can.
func TestSweepHandoverIsPacedThenRefused(t *testing.T) {
	s := &recordingStarter{}
	d, m := newTestDiscovererWith(t, s, func(o *Options) { o.NewHostsRate, o.NewHostsBurst = 50, 1 }, zap.NewNop())
	o := &openRuns{done: make(chan struct{})}
	close(o.done)
	now := time.Now()
	require.Equal(t, resultHanded, d.handOver(context.Background(), "n1", now, now.Add(time.Minute), o))
	// the bucket is empty: the next token comes in 20 ms, within the window
	require.Equal(t, resultHanded, d.handOver(context.Background(), "n2", now, time.Now().Add(time.Minute), o))
	require.Equal(t, 2, s.started())
	// a window that closes before the next token: refused at once, no describe, no start
	described := s.described
	require.Equal(t, resultRefused, d.handOver(context.Background(), "n3", now, time.Now(), o))
	require.Equal(t, described, s.described)
	require.Equal(t, 2, s.started())
	require.Equal(t, 1.0, refused(m, metrics.RefusedRate))
}

// A reply larger than discovery reads, or one without a valid sender, is refused and counted.
func TestReplyIntake(t *testing.T) {
	d, m := newTestDiscoverer(t, &recordingStarter{})
	id, ok := d.replyIdentity([]byte(`{"protocol":"io.choria.protocol.v2.transport","headers":{"sender":"n1.example"}}`))
	require.True(t, ok)
	require.Equal(t, "n1.example", id)

	big := `{"protocol":"io.choria.protocol.v2.transport","headers":{"sender":"n1.example"},"data":"` + strings.Repeat("x", MaxReplySize) + `"}`
	_, ok = d.replyIdentity([]byte(big))
	require.False(t, ok)
	require.Equal(t, 1.0, refused(m, metrics.RefusedSize))

	for _, bad := range []string{`not json`, `{"protocol":"io.choria.protocol.v2.transport","headers":{"sender":"a b"}}`, `{"protocol":"io.choria.protocol.v2.transport"}`} {
		_, ok = d.replyIdentity([]byte(bad))
		require.False(t, ok, bad)
	}
	require.Equal(t, 3.0, refused(m, metrics.RefusedInvalid))
}

// A flood of bad events is not a flood of log lines: an interval logs a few with what was wrong,
// and one summary of everything refused, which says the next sweep finds a real host again.
func TestRefusalsAreSummarisedOncePerInterval(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	d, _ := newTestDiscovererWith(t, &recordingStarter{}, func(o *Options) { o.NewHostsRate, o.NewHostsBurst = 0.001, 1 }, zap.New(core))
	for range 500 {
		d.HandleEvent(context.Background(), []byte("garbage"))
	}
	for i := range 5 {
		d.HandleEvent(context.Background(), startupEvent(t, fmt.Sprintf("n%d.example", i), "provision_mode_server"))
	}
	d.HandleEvent(context.Background(), oversizedStartup(t, "big.example"))
	require.Equal(t, detailedRefusals, logs.FilterMessage("dropping lifecycle event").Len())

	d.gate.report()
	summary := logs.FilterMessageSnippet("found again by the next discovery sweep").All()
	require.Len(t, summary, 1)
	fields := summary[0].ContextMap()
	require.EqualValues(t, 505, fields["refused"])
	require.EqualValues(t, 500, fields[metrics.RefusedInvalid])
	require.EqualValues(t, 4, fields[metrics.RefusedRate])
	require.EqualValues(t, 1, fields[metrics.RefusedSize])

	// a quiet interval logs nothing, and the next one has its budget of detailed lines again
	d.gate.report()
	require.Len(t, logs.FilterMessageSnippet("found again by the next discovery sweep").All(), 1)
	d.HandleEvent(context.Background(), []byte("garbage"))
	require.Equal(t, detailedRefusals+1, logs.FilterMessage("dropping lifecycle event").Len())
}

// What the NATS client drops from its own buffer is counted as full at the next report.
func TestClientDropsAreCounted(t *testing.T) {
	d, m := newTestDiscoverer(t, &recordingStarter{})
	dropped := 0
	d.gate.watch(func() (int, error) { return dropped, nil })
	d.gate.report()
	require.Zero(t, refused(m, metrics.RefusedFull))
	dropped = 7
	d.gate.report()
	dropped = 9
	d.gate.report()
	require.Equal(t, 9.0, refused(m, metrics.RefusedFull))
}
