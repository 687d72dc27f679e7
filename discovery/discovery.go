package discovery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	choriaclient "github.com/choria-io/go-choria/client/client"
	"github.com/choria-io/go-choria/inter"
	"github.com/choria-io/go-choria/lifecycle"
	"github.com/choria-io/go-choria/protocol"
	"github.com/nats-io/nats.go"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/internal/logging"
	"github.com/choria-temporal/provisioner/internal/metrics"
	"github.com/choria-temporal/provisioner/workflows"
)

// Starter is the part of the Temporal client discovery uses.
type Starter interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	GetWorkflow(ctx context.Context, workflowID string, runID string) client.WorkflowRun
	Lister
}

// Lister is the part of the Temporal client a sweep lists the open runs with.
type Lister interface {
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// PauseChecker tells whether fleet-wide provisioning is paused.
type PauseChecker interface {
	Paused(ctx context.Context) (bool, error)
}

// Options configure a Discoverer.
type Options struct {
	Interval          time.Duration
	DiscoveryTimeout  time.Duration     // how long a sweep listens for replies
	Component         string            // lifecycle component of servers in provisioning mode
	Start             workflows.Starter // task queue, site and fast mode of the runs it starts
	StartConcurrency  int               // start calls in flight during a sweep
	DisableEvents     bool
	DisableBroadcasts bool
	Pause             PauseChecker // nil: never paused
	Version           string       // announced in the provisioner's own startup event
}

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
}

// New makes a Discoverer over a Choria client framework on the provisioning collective.
func New(fw inter.Framework, starter Starter, opts Options, m *metrics.Metrics, log *zap.Logger) *Discoverer {
	if opts.StartConcurrency <= 0 {
		opts.StartConcurrency = 16
	}
	if opts.DiscoveryTimeout <= 0 {
		opts.DiscoveryTimeout = 2 * time.Second
	}
	return &Discoverer{fw: fw, starter: starter, opts: opts, metrics: m, log: log, now: time.Now, recheck: FinishingRecheck}
}

// Run sweeps at start and every interval and listens for startup events, until ctx ends.
func (d *Discoverer) Run(ctx context.Context) error {
	if !d.opts.DisableEvents {
		conn, err := d.fw.NewConnector(ctx, d.fw.MiddlewareServers, "provisioner-events", d.fw.Logger("events"))
		if err != nil {
			return fmt.Errorf("connecting for startup events: %w", err)
		}
		nc := conn.Nats()
		defer nc.Close()
		d.connMu.Lock()
		d.conn = conn
		d.connMu.Unlock()
		defer func() { d.connMu.Lock(); d.conn = nil; d.connMu.Unlock() }()
		d.announce(conn)
		// events are handed to Temporal by StartConcurrency goroutines: one at a time, a burst of
		// thousands of startup events waited minutes for its signal-with-starts
		queue := make(chan receivedEvent, EventQueueSize)
		for i := 0; i < d.opts.StartConcurrency; i++ {
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case ev := <-queue:
						d.queued.Add(-1)
						d.handleEvent(ctx, ev.data, ev.at)
					}
				}
			}()
		}
		sub, err := nc.QueueSubscribe(StartupSubject(d.opts.Component), EventQueueGroup, func(m *nats.Msg) {
			select {
			case queue <- receivedEvent{data: m.Data, at: d.now().UTC()}:
				d.queued.Add(1)
			default:
				// bounded: the next sweep finds the host
				d.log.Warn("startup event queue full, dropping an event", zap.Int("queue", EventQueueSize))
			}
		})
		if err != nil {
			return fmt.Errorf("subscribing to startup events: %w", err)
		}
		defer sub.Unsubscribe()
		d.log.Info("listening for startup events", zap.String("subject", sub.Subject))
	}

	if d.opts.DisableBroadcasts {
		<-ctx.Done()
		return nil
	}

	ticker := time.NewTicker(d.opts.Interval)
	defer ticker.Stop()
	// the paused gauge follows the control workflow between sweeps too
	pauseTicker := time.NewTicker(10 * time.Second)
	defer pauseTicker.Stop()
	for {
		if _, err := d.Sweep(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("discovery sweep failed", zap.Error(err))
		}
	wait:
		select {
		case <-ctx.Done():
			return nil
		case <-pauseTicker.C:
			d.paused(ctx)
			goto wait
		case <-ticker.C:
		}
	}
}

// ProvisionerComponent is the lifecycle component of the provisioner's own startup event.
const ProvisionerComponent = "provisioner"

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

// paused reports the fleet-wide pause state and mirrors it in the paused gauge. When the state
// cannot be read the sweep goes on: starting a host's workflow is safe, and a paused fleet's
// running workflows hold on their own.
func (d *Discoverer) paused(ctx context.Context) bool {
	if d.opts.Pause == nil {
		return false
	}
	p, err := d.opts.Pause.Paused(ctx)
	if err != nil {
		d.log.Warn("could not read the pause state", zap.Error(err))
		return false
	}
	v := 0.0
	if p {
		v = 1
	}
	d.metrics.Paused.WithLabelValues(d.metrics.Site).Set(v)
	return p
}

// Sweep runs one broadcast discovery and starts or signals a workflow for each host found, as
// its reply arrives: a fleet already waiting is at work within milliseconds instead of after
// the discovery window. It returns how many sightings it handed to Temporal. A paused fleet is
// not swept.
func (d *Discoverer) Sweep(ctx context.Context) (int, error) {
	if d.paused(ctx) {
		d.log.Info("provisioning is paused, skipping the discovery sweep")
		return 0, nil
	}
	d.metrics.DiscoverCycles.WithLabelValues(d.metrics.Site).Inc()
	// every reply to this sweep was sent after this moment: a host's run that restarted it later
	// makes its sighting stale
	sweptAt := d.now().UTC()

	open := d.listOpen(ctx)

	// replies are queued, never waited on: go-choria's client drops what is still unread when
	// the window closes
	queue := make(chan string, SweepQueueSize)
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		found    int
		dropped  int
		handed   int
		absorbed int
		wg       sync.WaitGroup
	)
	for i := 0; i < d.opts.StartConcurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range queue {
				h, a := d.handOver(ctx, id, sweptAt, open)
				mu.Lock()
				handed, absorbed = handed+h, absorbed+a
				mu.Unlock()
			}
		}()
	}
	err := d.broadcast(ctx, func(id string) {
		if err := workflows.ValidateIdentity(id); err != nil {
			d.log.Warn("ignoring discovered node", zap.Error(err))
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[id] {
			return
		}
		seen[id] = true
		found++
		select {
		case queue <- id:
		default:
			dropped++ // bounded: the next sweep finds it
		}
	})
	close(queue)
	wg.Wait()
	if err != nil {
		d.metrics.DiscoveryErrors.WithLabelValues(d.metrics.Site).Inc()
		return handed, fmt.Errorf("broadcast discovery: %w", err)
	}
	if dropped > 0 {
		d.log.Warn("sweep queue full, hosts left for the next sweep", zap.Int("dropped", dropped), zap.Int("queue", SweepQueueSize))
	}
	d.log.Info("discovery sweep", zap.Int("found", found), zap.Int("handed_over", handed), zap.Int("at_work", absorbed))
	return handed, nil
}

// handOver judges one sweep sighting: absorbed by a run the listing found at work (1, as
// absorbed), else judged against the host's latest run and handed to Temporal (1, as handed) or not.
func (d *Discoverer) handOver(ctx context.Context, identity string, sweptAt time.Time, open *openRuns) (handed, absorbed int) {
	if open.absorbs(ctx, identity) {
		return 0, 1
	}
	if h, err := d.sighted(ctx, identity, workflows.SourceDiscovery, sweptAt); err == nil && h {
		return 1, 0
	}
	return 0, 0
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
		ids, err := AbsorbingRuns(lctx, d.starter)
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

// ListTimeout bounds a sweep's listing of the open runs; past it the sweep describes instead.
const ListTimeout = 30 * time.Second

// listPageSize is the runs per page of that listing (the visibility store's usual maximum).
const listPageSize = 1000

// openRunsQuery finds every open run of the host workflow, whatever its task queue: a describe
// by workflow ID, which it replaces, did not look at the task queue either.
const openRunsQuery = "WorkflowType = '" + workflows.WorkflowName + "' AND ExecutionStatus = 'Running'"

// AbsorbingRuns lists, in one paged visibility query, the workflow IDs of the open runs that
// absorb a sweep's sighting of their host: the runs before their helper, and deferred ones. A run
// at its helper or restart may be past its restart RPC (runs upsert no step after the helper)
// and is described, as every run was before. The listing can lag the runs by a moment (the
// visibility store is written after the history): a run listed before its helper that has since
// finished has restarted its host, so a sighting it absorbs is an echo; one that failed since
// is found again by the next sweep.
func AbsorbingRuns(ctx context.Context, l Lister) (map[string]struct{}, error) {
	ids := map[string]struct{}{}
	var token []byte
	for {
		resp, err := l.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			PageSize: listPageSize, NextPageToken: token, Query: openRunsQuery})
		if err != nil {
			return nil, fmt.Errorf("listing the open runs: %w", err)
		}
		for _, info := range resp.GetExecutions() {
			if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && !mayBeFinishing(info) {
				ids[info.GetExecution().GetWorkflowId()] = struct{}{}
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return ids, nil
		}
	}
}

// mayBeFinishing says whether an open run may be past its restart RPC, by its search attributes:
// at its helper (a run upserts no step after it) or at restart, and not deferred.
func mayBeFinishing(info *workflowpb.WorkflowExecutionInfo) bool {
	if keyword(info, workflows.OutcomeKey.GetName()) == workflows.OutcomeDeferred {
		return false
	}
	switch keyword(info, workflows.StepKey.GetName()) {
	case workflows.StepHelper, workflows.StepRestart:
		return true
	}
	return false
}

// SweepQueueSize bounds the sightings of one sweep waiting to be handed to Temporal.
const SweepQueueSize = 100000

// broadcast sends one discovery request (agent filter choria_provision) to the provisioning
// collective and calls found with the sender of each reply as it arrives, for the discovery
// window. go-choria's broadcast discoverer gives its answer only at the end of the window.
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
		sender, err := replySender(m.Data())
		if err != nil {
			d.log.Warn("unreadable discovery reply", zap.Error(err))
			return
		}
		found(sender)
	})
}

// replySender is the sender of a discovery reply, read from its transport's headers (v2's
// sender, v1's mc_sender) and nothing else: one handler reads a sweep's replies while they
// queue in go-choria's client, and decoding whole transports (their payload base64) was slow
// enough that a 10,000-host sweep's replies held ~17 MB there at once (docs/performance.md).
func replySender(data []byte) (string, error) {
	var t struct {
		Protocol protocol.ProtocolVersion `json:"protocol"`
		Headers  struct {
			Sender   string `json:"sender"`
			MCSender string `json:"mc_sender"`
		} `json:"headers"`
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return "", fmt.Errorf("undecodable transport: %w", err)
	}
	switch t.Protocol {
	case protocol.TransportV2:
		return t.Headers.Sender, nil
	case protocol.TransportV1:
		return t.Headers.MCSender, nil
	}
	return "", fmt.Errorf("unknown transport protocol %q", t.Protocol)
}

// HandleEvent handles one message from the startup subject. Anything that is not a startup event
// of a valid identity is logged and dropped: it never becomes a workflow.
func (d *Discoverer) HandleEvent(ctx context.Context, data []byte) {
	d.handleEvent(ctx, data, d.now().UTC())
}

// receivedEvent is a startup event waiting for a goroutine, with the time it arrived.
type receivedEvent struct {
	data []byte
	at   time.Time
}

// EventQueueSize bounds the startup events waiting to be handed to Temporal.
const EventQueueSize = 10000

// LateEvent is how long a startup event may wait in the queue before discovery checks, as for a
// sweep, that the host was not provisioned since it arrived.
const LateEvent = time.Second

func (d *Discoverer) handleEvent(ctx context.Context, data []byte, received time.Time) {
	id, err := ParseStartupEvent(data, d.opts.Component)
	if err != nil {
		d.log.Warn("dropping lifecycle event", zap.Error(err))
		return
	}
	if d.paused(ctx) {
		d.log.Info("provisioning is paused, not starting work for a startup event", zap.String(logging.FieldIdentity, id))
		return
	}
	_ = d.Sighted(ctx, id, workflows.SourceEvent, received)
}

// verdict is what a sighting needs, given the host's latest run.
type verdict int

const (
	startRun  verdict = iota // no run, or a closed one the sighting is newer than: start (or signal) as usual
	openRun                  // a run is at work on the host and absorbs the sighting
	finishing                // a run past its restart RPC (or between steps): judge once it has closed
	staleSeen                // the host left provisioning mode after the sighting: drop it
)

// check reads the host's latest run from the history service (not the rate-limited visibility
// store) and judges a sighting made at seenAt against it.
//
// A run that completed after seenAt makes the sighting stale only if the host could still have
// answered in provisioning mode from that run when the sighting was made: the run's result says
// when its restart RPC succeeded (ProvisionResult.LeftProvisioningBy). Judging by the close time
// instead went wrong when a provisioner stopped during a run's restart grace: the run closed only
// when a provisioner came back, after that provisioner's first sweep began, and every host seen
// in that sweep waited a whole interval.
func (d *Discoverer) check(ctx context.Context, identity string, seenAt time.Time) verdict {
	resp, err := d.starter.DescribeWorkflowExecution(ctx, workflows.WorkflowID(identity), "")
	if err != nil {
		return startRun // none yet, or Temporal cannot say: start or signal as usual
	}
	info := resp.GetWorkflowExecutionInfo()
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		// a run in its restart grace has no activity pending and will not serve this sighting;
		// one with an activity pending, deferred, or not yet at its helper will
		if len(resp.GetPendingActivities()) == 0 && mayBeFinishing(info) {
			return finishing
		}
		return openRun
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		// a run that closes at its restart RPC (no restart grace) leaves the server answering in
		// provisioning mode for up to splay+2 s more: a sweep begun in that window is an echo
		if !info.GetCloseTime().AsTime().Add(workflows.RestartWindow(0)).After(seenAt) {
			return startRun
		}
		var res workflows.ProvisionResult
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := d.starter.GetWorkflow(rctx, workflows.WorkflowID(identity), info.GetExecution().GetRunId()).Get(rctx, &res); err != nil {
			d.log.Warn("could not read the latest run's result, judging the sighting by the run's close time",
				zap.String(logging.FieldIdentity, identity), zap.Error(err))
			return staleSeen
		}
		if left := res.LeftProvisioningBy(); !left.IsZero() && left.Before(seenAt) {
			return startRun // the host is back in provisioning mode since that run restarted it
		}
		return staleSeen
	}
	return startRun
}

// keyword reads a keyword search attribute from a run's description ("" when unset).
func keyword(info *workflowpb.WorkflowExecutionInfo, name string) string {
	p, ok := info.GetSearchAttributes().GetIndexedFields()[name]
	if !ok {
		return ""
	}
	var v string
	if converter.GetDefaultDataConverter().FromPayload(p, &v) != nil {
		return ""
	}
	return v
}

// FinishingRecheck is how often a sighting of a host whose run is past its restart RPC looks
// whether that run has closed before it is judged. The run closes at its next workflow task,
// within moments of the restart RPC while a worker is up.
const FinishingRecheck = 500 * time.Millisecond

// How long a finishing run's last workflow task can wait for a worker when the worker that ran
// its restart RPC stopped first: one dispatched to that worker's sticky queue moves to the shared
// queue after the sticky schedule-to-start timeout (the SDK's default); one its poll had already
// taken (a poll cancelled on shutdown) is retried only after the run's workflow task timeout.
const stickyScheduleToStart = 5 * time.Second

// finishingWait is how long at most a sighting waits for a finishing run to close: the longest
// its last task can wait for a worker, or a run of a version with a restart grace (open splay+3 s
// after the restart RPC), with two looks to spare. Shorter, it gave up on a run a stopped
// provisioner had left with its last task in hand (closed 10 s later by the next one) and the
// host, re-imaged meanwhile, waited a whole discovery interval.
func (d *Discoverer) finishingWait() time.Duration {
	tt := d.opts.Start.TaskTimeout()
	grace := workflows.RestartWindow(0) + time.Second
	return max(tt, stickyScheduleToStart, grace) + 2*FinishingRecheck
}

// settleLater judges a sighting of a finishing run once the run has closed, off the caller's
// goroutine (a sweep's handover and the event workers are bounded), and then hands it over.
func (d *Discoverer) settleLater(ctx context.Context, identity, source string, seenAt time.Time) {
	go func() {
		looks := int(d.finishingWait() / FinishingRecheck)
		for range looks {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d.recheck):
			}
			switch d.check(ctx, identity, seenAt) {
			case finishing:
				continue
			case staleSeen:
				d.dropStale(identity)
			case openRun:
				if source == workflows.SourceEvent {
					_ = d.start(ctx, identity, source, seenAt)
				}
			case startRun:
				_ = d.start(ctx, identity, source, seenAt)
			}
			return
		}
		// still open: it absorbs the sighting, as an open run does
		if source == workflows.SourceEvent {
			_ = d.start(ctx, identity, source, seenAt)
		}
	}()
}

func (d *Discoverer) dropStale(identity string) {
	d.log.Debug("stale sighting of a host provisioned since, dropped", zap.String(logging.FieldIdentity, identity))
	d.metrics.StaleSightings.WithLabelValues(d.metrics.Site).Inc()
}

// Sighted starts the host's workflow, or signals it when it runs already; seenAt is when the
// host was seen (for a sweep, when the sweep began).
func (d *Discoverer) Sighted(ctx context.Context, identity, source string, seenAt time.Time) error {
	_, err := d.sighted(ctx, identity, source, seenAt)
	return err
}

// sighted reports whether the sighting was handed to Temporal now.
func (d *Discoverer) sighted(ctx context.Context, identity, source string, seenAt time.Time) (bool, error) {
	// A sweep's sightings are older than the moment they reach Temporal, and a sweep over
	// thousands of hosts hands them over for many seconds while the hosts it found are being
	// provisioned and restarted: check each against the host's latest run first; likewise a
	// startup event that waited in the queue.
	if source == workflows.SourceDiscovery || d.now().Sub(seenAt) > LateEvent {
		switch d.check(ctx, identity, seenAt) {
		case staleSeen:
			d.dropStale(identity)
			return false, nil
		case finishing:
			d.settleLater(ctx, identity, source, seenAt)
			return false, nil
		case openRun:
			if source == workflows.SourceDiscovery {
				return false, nil
			}
		}
	}
	return true, d.start(ctx, identity, source, seenAt)
}

// eagerStart says whether a run starts with its first workflow task handed to this process's
// worker in the start's response (when it has a free slot), skipping a dispatch through
// Temporal's matching service and a history write: only for a startup event that arrived alone.
// Hosts found together (a sweep, a burst of events) start through the task queue, which then
// paces them: started eagerly, the 10,000 hosts of a burst were all at work in this process at
// once, its memory five times as large and its first minute's rate a tenth (docs/performance.md).
func (d *Discoverer) eagerStart(source string) bool {
	return source == workflows.SourceEvent && d.queued.Load() == 0
}

// start hands a sighting to Temporal: a new run of the host's workflow, or nothing when one is
// open (a signal would cost the open run a history event and a workflow task, and tell it nothing).
func (d *Discoverer) start(ctx context.Context, identity, source string, seenAt time.Time) error {
	in := workflows.ProvisionInput{Identity: identity, Source: source, SeenAt: seenAt}
	opts := d.opts.Start.Options(in)
	opts.EnableEagerStart = d.eagerStart(source)
	_, err := d.starter.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, in)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			d.log.Error("could not start or signal workflow", zap.String(logging.FieldIdentity, identity), zap.Error(err))
		}
		return err
	}
	// counted as the Choria Provisioner counted hosts added to its work list: a sighting that
	// a run at work absorbs (a sweep's of an open run) or that is stale is not
	switch source {
	case workflows.SourceDiscovery:
		d.metrics.Discovered.WithLabelValues(d.metrics.Site).Inc()
	case workflows.SourceEvent:
		d.metrics.EventDiscovered.WithLabelValues(d.metrics.Site).Inc()
	}
	d.log.Debug("sighting handed to Temporal", zap.String(logging.FieldIdentity, identity), zap.String("source", source))
	return nil
}
