package discovery

import (
	"context"
	"encoding/base64"
	"fmt"
	"sync"
	"time"

	choriaclient "github.com/choria-io/go-choria/client/client"
	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/protocol"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/workflows"
	"github.com/choria-temporal/provisioner/workflows/hostruns"
)

// Sweep runs one broadcast discovery and starts a workflow for each host found, as its reply
// arrives: a fleet already waiting is at work within milliseconds instead of after the discovery
// window. It returns how many sightings it handed to Temporal. A paused fleet is not swept.
func (d *Discoverer) Sweep(ctx context.Context) (int, error) {
	if d.paused(ctx) {
		d.missed.Store(true)
		d.log.Info("provisioning is paused, skipping the discovery sweep")
		return 0, nil
	}
	d.metrics.DiscoverCycles.WithLabelValues(d.metrics.Site).Inc()
	// every reply to this sweep was sent after this moment: a host's run that restarted it later
	// makes its sighting stale
	sweptAt := d.now().UTC()
	h := d.handover(ctx, sweptAt, d.listOpen(ctx))
	err := d.broadcast(ctx, h.found)
	h.finish()
	d.missed.Store(err != nil)
	if err != nil {
		d.metrics.DiscoveryErrors.WithLabelValues(d.metrics.Site).Inc()
		return h.counts[resultHanded], fmt.Errorf("broadcast discovery: %w", err)
	}
	d.log.Info("discovery sweep", zap.Int("found", len(h.seen)), zap.Int("handed_over", h.counts[resultHanded]),
		zap.Int("at_work", h.counts[resultAbsorbed]), zap.Int("refused", h.counts[resultRefused]))
	return h.counts[resultHanded], nil
}

// handoverResult is what became of one sweep sighting.
type handoverResult int

const (
	resultJudged   handoverResult = iota // judged against the host's latest run and not handed over
	resultHanded                         // handed to Temporal
	resultAbsorbed                       // absorbed by a run the listing found at work
	resultRefused                        // over the new-hosts rate until the handover window closed
)

// sweepHandover hands one sweep's sightings to Temporal from StartConcurrency goroutines. The
// replies are queued, never waited on: go-choria's client drops what is still unread when the
// window closes.
type sweepHandover struct {
	queue  chan string
	wg     sync.WaitGroup
	mu     sync.Mutex
	seen   map[string]struct{}
	counts [resultRefused + 1]int
	refuse func() // a sighting that finds the queue full
}

func (d *Discoverer) handover(ctx context.Context, sweptAt time.Time, open *openRuns) *sweepHandover {
	h := &sweepHandover{queue: make(chan string, SweepQueueSize), seen: map[string]struct{}{},
		refuse: func() { d.gate.refuse(metrics.RefusedFull, "", nil) }}
	deadline := time.Now().Add(d.opts.DiscoveryTimeout + HandoverWindow)
	for range d.opts.StartConcurrency {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for id := range h.queue {
				r := d.handOver(ctx, id, sweptAt, deadline, open)
				h.mu.Lock()
				h.counts[r]++
				h.mu.Unlock()
			}
		}()
	}
	return h
}

// found queues a sweep's sighting once; the sightings are bounded by SweepQueueSize.
func (h *sweepHandover) found(identity string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.seen[identity]; ok {
		return
	}
	if len(h.seen) >= SweepQueueSize {
		h.refuse()
		return
	}
	h.seen[identity] = struct{}{}
	select {
	case h.queue <- identity:
	default:
		h.refuse()
	}
}

// finish waits until every queued sighting is handed over, judged or refused.
func (h *sweepHandover) finish() {
	close(h.queue)
	h.wg.Wait()
}

// handOver judges one sweep sighting: absorbed by a run the listing found at work; else, given
// a token of the new-hosts rate by deadline, judged against the host's latest run and handed to
// Temporal or not; else refused, for the next sweep to find.
func (d *Discoverer) handOver(ctx context.Context, identity string, sweptAt, deadline time.Time, open *openRuns) handoverResult {
	if open.absorbs(ctx, identity) {
		return resultAbsorbed
	}
	if !d.gate.await(ctx, deadline) {
		return resultRefused
	}
	if h, err := d.sighted(ctx, identity, workflows.SourceDiscovery, sweptAt); err == nil && h {
		return resultHanded
	}
	return resultJudged
}

// broadcast sends one discovery request (agent filter choria_provision) to the provisioning
// collective and calls found with the sender of each reply that passes the intake's checks as
// it arrives, for the discovery window. go-choria's broadcast discoverer answers only at the end.
func (d *Discoverer) broadcast(ctx context.Context, found func(identity string)) error {
	filter := protocol.NewFilter()
	filter.AddAgentFilter(ProvisionAgent)
	// the discovery agent answers a "ping" body that matches the filter
	msg, err := d.fw.NewMessage([]byte(base64.StdEncoding.EncodeToString([]byte("ping"))), "discovery", ProvisioningCollective, "request", nil)
	if err != nil {
		return fmt.Errorf("discovery request: %w", err)
	}
	msg.SetReplyTo(msg.ReplyTarget())
	msg.SetFilter(filter)
	opts := []choriaclient.Option{choriaclient.Receivers(3), choriaclient.Timeout(d.opts.DiscoveryTimeout), choriaclient.Name("provisioner-discovery")}
	d.connMu.Lock()
	if d.conn != nil {
		// one receiver on the shared connection: go-choria names every receiver's
		// subscription alike, so a second would outlive the request
		defer d.connMu.Unlock()
		opts = append(opts, choriaclient.Receivers(1), choriaclient.Connection(d.conn))
	} else {
		d.connMu.Unlock()
	}
	cl, err := choriaclient.New(d.fw, opts...)
	if err != nil {
		return fmt.Errorf("choria client: %w", err)
	}
	// bounds the connection and publish too, not only the wait for replies
	rctx, cancel := context.WithTimeout(ctx, d.opts.DiscoveryTimeout+5*time.Second)
	defer cancel()
	return cl.Request(rctx, msg, func(_ context.Context, m inter.ConnectorMessage) {
		if id, ok := d.replyIdentity(m.Data()); ok {
			found(id)
		}
	})
}

// openRuns is what one listing at a sweep's start says about the hosts' runs: the workflow IDs
// of the runs that absorb a sighting of their host (AbsorbingRuns), once done is closed; none
// when the listing failed, and every sighting is then judged by a describe of its own.
type openRuns struct {
	done chan struct{}
	ids  map[string]struct{}
}

// listOpen lists the open runs while the sweep's replies arrive. A describe per sighting was the
// sweep's cost at scale: a 10,000-host burst's first sweep described every open run one at a
// time (the provisioner's peak memory, docs/performance.md), each a history-service read of the
// run's mutable state; one paged visibility query reads them all.
func (d *Discoverer) listOpen(ctx context.Context) *openRuns {
	o := &openRuns{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		lctx, cancel := context.WithTimeout(ctx, ListTimeout)
		defer cancel()
		ids, err := AbsorbingRuns(lctx, d.starter, d.opts.Start.TaskQueue)
		if err != nil {
			d.log.Warn("could not list the open runs, describing each sighted host's run instead", zap.Error(err))
			return
		}
		o.ids = ids
	}()
	return o
}

// absorbs waits for the listing and says whether it found a run at work on the host.
func (o *openRuns) absorbs(ctx context.Context, identity string) bool {
	select {
	case <-o.done:
	case <-ctx.Done():
		return false
	}
	_, ok := o.ids[workflows.WorkflowID(identity)]
	return ok
}

// AbsorbingRuns lists, in one paged visibility query, the workflow IDs of the open runs of ours
// (workflow type and taskQueue: a workflow anyone else started under a host's ID is no run of
// the host's, and is judged by a describe) that absorb a sweep's sighting of their host: the
// runs before their helper, and deferred ones. A run at its helper or restart may be past its
// restart RPC (runs upsert no step after the helper) and is described. The listing can lag the
// runs by a moment (the visibility store is written after the history): a run listed before its
// helper that has since finished has restarted its host, so a sighting it absorbs is an echo; one
// that failed since is found again by the next sweep. At most SweepQueueSize runs are kept, as
// many as a sweep may sight: past them the listing fails, and each sighting is described.
func AbsorbingRuns(ctx context.Context, l Lister, taskQueue string) (map[string]struct{}, error) {
	ids := map[string]struct{}{}
	tooMany := false
	query := hostruns.HostsQuery{TaskQueue: taskQueue, Running: true}.String()
	err := hostruns.Each(ctx, l, query, func(r hostruns.Run) bool {
		if !r.Running() || !r.Ours(taskQueue) || mayBeFinishing(r) {
			return true
		}
		if tooMany = len(ids) >= SweepQueueSize; tooMany {
			return false
		}
		ids[r.WorkflowID] = struct{}{}
		return true
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("listing the open runs: %w", err)
	case tooMany:
		return nil, fmt.Errorf("more than %d open runs", SweepQueueSize)
	}
	return ids, nil
}
