package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/choria-io/go-choria/protocol"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/common/metrics"
	"github.com/choria-temporal/provisioner/workflows"
)

// pendingBytes bounds the NATS client's own buffer of startup events not yet read by receive,
// which reads one in microseconds: the buffer fills only when this process is starved of CPU,
// and what the client drops then is counted as full (gate.report).
const pendingBytes = 32 << 20

// listen connects for startup events, announces the provisioner, subscribes, and starts the
// goroutines that hand the admitted events to Temporal; stop undoes it.
func (d *Discoverer) listen(ctx context.Context) (stop func(), err error) {
	conn, err := d.fw.NewConnector(ctx, d.fw.MiddlewareServers, "provisioner-events", d.fw.Logger("events"))
	if err != nil {
		return nil, fmt.Errorf("connecting for startup events: %w", err)
	}
	nc := conn.Nats()
	d.connMu.Lock()
	d.conn = conn
	d.connMu.Unlock()
	d.announce(conn)
	// events are handed to Temporal by StartConcurrency goroutines: one at a time, a burst of
	// thousands of startup events waited minutes for its starts
	queue := make(chan sighting, EventQueueSize)
	for range d.opts.StartConcurrency {
		go d.handleEvents(ctx, queue)
	}
	sub, err := nc.QueueSubscribe(StartupSubject(d.opts.Component), EventQueueGroup, func(m *nats.Msg) { d.receive(queue, m.Data) })
	if err == nil {
		err = sub.SetPendingLimits(EventQueueSize, pendingBytes)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("subscribing to startup events: %w", err)
	}
	d.gate.watch(sub.Dropped)
	d.log.Info("listening for startup events", zap.String("subject", sub.Subject))
	return func() {
		_ = sub.Unsubscribe()
		d.connMu.Lock()
		d.conn = nil
		d.connMu.Unlock()
		nc.Close()
	}, nil
}

// sighting is a host seen at a moment, by a source.
type sighting struct {
	identity string
	source   string
	at       time.Time
}

// receive checks one message of the startup subject before anything is queued: its size, its
// form (a startup event of a valid identity), then the new-hosts rate. A refused event of a
// real host is not lost: the host waits in provisioning mode and answers the next sweep.
func (d *Discoverer) receive(queue chan<- sighting, data []byte) {
	id, ok := d.admitEvent(data)
	if !ok {
		return
	}
	select {
	case queue <- sighting{identity: id, source: workflows.SourceEvent, at: d.now().UTC()}:
		d.queued.Add(1)
	default:
		d.gate.refuse(metrics.RefusedFull, "", nil)
	}
}

func (d *Discoverer) handleEvents(ctx context.Context, queue <-chan sighting) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-queue:
			d.queued.Add(-1)
			d.handleEvent(ctx, s.identity, s.at)
		}
	}
}

// HandleEvent handles one message from the startup subject at once, after the checks receive
// makes. Anything that is not a startup event of a valid identity is counted and dropped: it
// never becomes a workflow.
func (d *Discoverer) HandleEvent(ctx context.Context, data []byte) {
	if id, ok := d.admitEvent(data); ok {
		d.handleEvent(ctx, id, d.now().UTC())
	}
}

// admitEvent is the identity of a startup event that passed the size, form and rate checks.
func (d *Discoverer) admitEvent(data []byte) (string, bool) {
	if len(data) > MaxEventSize {
		d.gate.refuse(metrics.RefusedSize, "dropping lifecycle event",
			fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadEvent, len(data), MaxEventSize))
		return "", false
	}
	id, err := ParseStartupEvent(data, d.opts.Component)
	if err != nil {
		d.gate.refuse(metrics.RefusedInvalid, "dropping lifecycle event", err)
		return "", false
	}
	return id, d.gate.admit()
}

func (d *Discoverer) handleEvent(ctx context.Context, identity string, received time.Time) {
	if d.paused(ctx) {
		d.log.Info("provisioning is paused, not starting work for a startup event", zap.String(logging.FieldIdentity, identity))
		return
	}
	_ = d.Sighted(ctx, identity, workflows.SourceEvent, received)
}

// replyIdentity is the sender of a discovery reply that passed the size and form checks; the
// rate is the sweep's to apply, which paces its handover (sweep.go).
func (d *Discoverer) replyIdentity(data []byte) (string, bool) {
	if len(data) > MaxReplySize {
		d.gate.refuse(metrics.RefusedSize, "dropping discovery reply", fmt.Errorf("%d bytes, the limit is %d", len(data), MaxReplySize))
		return "", false
	}
	sender, err := replySender(data)
	if err == nil {
		err = workflows.ValidateIdentity(sender)
	}
	if err != nil {
		d.gate.refuse(metrics.RefusedInvalid, "ignoring discovery reply", err)
		return "", false
	}
	return sender, true
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
