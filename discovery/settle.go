package discovery

import (
	"context"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/workflows"
)

// How long a finishing run's last workflow task can wait for a worker when the worker that ran
// its restart RPC stopped first: one dispatched to that worker's sticky queue moves to the shared
// queue after the sticky schedule-to-start timeout (the SDK's default); one its poll had already
// taken (a poll cancelled on shutdown) is retried only after the run's workflow task timeout.
const stickyScheduleToStart = 5 * time.Second

// finishingWait is how long at most a sighting waits for a finishing run to close: the longest
// its last task can wait for a worker, with two looks to spare. Shorter, it would give up on a run
// a stopped provisioner left with its last task in hand (closed a task timeout later by the next
// one) and the host, re-imaged meanwhile, would wait a whole discovery interval.
func (d *Discoverer) finishingWait() time.Duration {
	return max(d.opts.Start.TaskTimeout(), stickyScheduleToStart) + 2*FinishingRecheck
}

// settler holds the sightings of hosts whose latest run is finishing until that run has closed.
// One goroutine, alive while it holds any, looks at each every recheck, one describe at a time;
// a host sighted again while it waits is held once, and past SettleQueueSize hosts a sighting is
// refused: a burst of re-announcements costs neither a goroutine nor a timer per sighting.
type settler struct {
	max     int
	mu      sync.Mutex
	waiting map[string]settling
	running bool // the goroutine is looking
}

// settling is one held sighting.
type settling struct {
	sighting
	ctx   context.Context // the sighting's: a sweep's or the event intake's, which Run ends
	looks int             // left before the open run is taken to absorb the sighting
}

func newSettler(size int) *settler {
	return &settler{max: size, waiting: map[string]settling{}}
}

// add holds s; start says the goroutine must be started, ok false that s was refused.
func (st *settler) add(ctx context.Context, s sighting, looks int) (start, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if w, dup := st.waiting[s.identity]; dup {
		// the later sighting says more (the host answered then), and an event's handling wins
		if s.at.After(w.at) {
			w.at = s.at
		}
		if s.source == workflows.SourceEvent {
			w.source = s.source
		}
		st.waiting[s.identity] = w
		return false, true
	}
	if len(st.waiting) >= st.max {
		return false, false
	}
	st.waiting[s.identity] = settling{sighting: s, ctx: ctx, looks: looks}
	start, st.running = !st.running, true
	return start, true
}

// held is a copy of what waits; none ends the goroutine, under the same lock add takes.
func (st *settler) held() []settling {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.waiting) == 0 {
		st.running = false
		return nil
	}
	out := make([]settling, 0, len(st.waiting))
	for _, w := range st.waiting {
		out = append(out, w)
	}
	return out
}

// looked records one look at w: done lets it go, else it has one look less.
func (st *settler) looked(w settling, done bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	cur, ok := st.waiting[w.identity]
	switch {
	case !ok:
	case done:
		delete(st.waiting, w.identity)
	default:
		cur.looks--
		st.waiting[w.identity] = cur
	}
}

// size is how many sightings are held.
func (st *settler) size() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.waiting)
}

// settleLater judges a sighting of a finishing run once the run has closed, off the caller's
// goroutine (a sweep's handover and the event workers are bounded), and then hands it over.
func (d *Discoverer) settleLater(ctx context.Context, s sighting) {
	start, ok := d.settle.add(ctx, s, int(d.finishingWait()/FinishingRecheck))
	if !ok {
		d.gate.refuse(metrics.RefusedFull, "", nil)
		return
	}
	if start {
		go d.settleLoop()
	}
}

func (d *Discoverer) settleLoop() {
	t := time.NewTicker(d.recheck)
	defer t.Stop()
	for range t.C {
		held := d.settle.held()
		if held == nil {
			return
		}
		for _, w := range held {
			d.settle.looked(w, d.settleOne(w))
		}
	}
}

// settleOne looks at one held sighting's run and acts when it has closed; it says whether the
// sighting is done with.
func (d *Discoverer) settleOne(w settling) bool {
	if w.ctx.Err() != nil {
		return true
	}
	v := d.check(w.ctx, w.identity, w.at)
	switch {
	case v == finishing && w.looks > 1:
		return false
	case v == staleSeen:
		d.dropStale(w.identity)
	case v == unjudged:
		d.gate.refuse(metrics.RefusedUnjudged, "", nil)
	case v == startRun:
		_ = d.start(w.ctx, w.identity, w.source, w.at)
	case v == takeOver:
		_ = d.startWith(w.ctx, w.identity, w.source, w.at, enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING)
	case w.source == workflows.SourceEvent:
		// the run is open (or still finishing after the last look) and absorbs the sighting, as
		// an open run does; an event of it is handed over as an event of an open run is
		_ = d.start(w.ctx, w.identity, w.source, w.at)
	}
	return true
}
