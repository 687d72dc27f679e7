package auditlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamSubject is the one subject the audit stream holds: every replica and the operator's
// commands append to it, so that one per-subject sequence orders the whole chain.
const StreamSubject = "choria.provisioner.audit"

// DefaultStream is the stream's name unless audit.stream names another.
const DefaultStream = "CHORIA-PROVISIONER-AUDIT"

// streamReadBatch bounds how many entries one read of the stream holds in memory at a time.
const streamReadBatch = 256

// streamReadWait bounds the wait for a batch the stream says it holds.
const streamReadWait = 5 * time.Second

// StreamStore keeps the chain in a Choria Streams (NATS JetStream) stream on the site's broker,
// which every replica shares: no namespace writer reaches it, and the stream refuses to delete
// or purge what it holds. Each entry is published expecting the subject's last sequence to be
// the one of the entry it chains after, so of two replicas appending at once one wins and the
// other gets ErrConflict, reads the newest and chains after it.
type StreamStore struct {
	js      jetstream.JetStream
	stream  jetstream.Stream
	name    string
	subject string

	mu sync.Mutex
	// the newest entry this store read or wrote and its stream sequence: the sequence the next
	// entry's publish expects (known false: read it again)
	known     bool
	lastEntry uint64
	lastMsg   uint64
}

// StreamConfig is the stream the audit wants: file storage, nothing deleted or purged through
// the API, entries kept for maxAge (beyond the longest validity the site issues) and never
// dropped for count or size.
func StreamConfig(name string, maxAge time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              name,
		Description:       "Choria Provisioner audit: every identity issued, ban, unban and retirement (internal/auditlog)",
		Subjects:          []string{StreamSubject},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Discard:           jetstream.DiscardOld,
		MaxAge:            maxAge,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgsPerSubject: -1,
		MaxMsgSize:        maxEntry,
		DenyDelete:        true,
		DenyPurge:         true,
		Replicas:          1,
	}
}

// OpenStream is the audit stream name on nc's account, created as StreamConfig when missing
// (which needs the right to create it). An existing stream is used only when it keeps the audit
// as StreamConfig would: its MaxAge may be longer (or unlimited), its replicas any; every other
// difference is refused, so that no setting of an existing stream weakens what it keeps.
func OpenStream(ctx context.Context, nc *nats.Conn, name string, maxAge time.Duration) (*StreamStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("audit stream %s: %w", name, err)
	}
	want := StreamConfig(name, maxAge)
	stream, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			stream, err = js.Stream(ctx, name) // another replica created it meanwhile
		} else if err != nil {
			return nil, fmt.Errorf("audit stream %s: creating it (the credentials need to publish to $JS.API.STREAM.CREATE.%s, or a Streams admin creates it first): %w", name, name, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("audit stream %s: %w%s", name, err, unreachable(err))
	}
	if bad := weakerThan(stream.CachedInfo().Config, want); len(bad) > 0 {
		return nil, fmt.Errorf("audit stream %s exists with settings that do not keep the audit: %s; change them (nats stream edit %s) or name another audit.stream",
			name, strings.Join(bad, ", "), name)
	}
	return &StreamStore{js: js, stream: stream, name: name, subject: StreamSubject}, nil
}

// unreachable says what an answer that never came means: a broker refuses a request its
// client may not publish without telling the requester.
func unreachable(err error) string {
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return " (the broker needs plugin.choria.network.stream.store, and the credentials the choria account)"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders):
		return " (no answer: the broker has no Choria Streams, or the credentials may not use them: a client JWT with --stream-user in the choria account)"
	}
	return ""
}

// weakerThan lists how have keeps entries less surely than want does.
func weakerThan(have, want jetstream.StreamConfig) []string {
	var bad []string
	if len(have.Subjects) != 1 || have.Subjects[0] != want.Subjects[0] {
		bad = append(bad, fmt.Sprintf("subjects %v, not [%s]", have.Subjects, want.Subjects[0]))
	}
	if have.Retention != want.Retention {
		bad = append(bad, fmt.Sprintf("retention %s, not %s", have.Retention, want.Retention))
	}
	if have.Storage != want.Storage {
		bad = append(bad, fmt.Sprintf("storage %s, not %s", have.Storage, want.Storage))
	}
	if have.Discard != want.Discard {
		bad = append(bad, fmt.Sprintf("discard %s, not %s", have.Discard, want.Discard))
	}
	if !have.DenyDelete {
		bad = append(bad, "deny_delete off")
	}
	if !have.DenyPurge {
		bad = append(bad, "deny_purge off")
	}
	if have.AllowRollup {
		bad = append(bad, "rollups allowed (a rollup purges)")
	}
	if have.Sealed {
		bad = append(bad, "sealed (takes no entry)")
	}
	if have.MaxAge != 0 && have.MaxAge < want.MaxAge {
		bad = append(bad, fmt.Sprintf("max_age %s, shorter than audit.max_age %s", have.MaxAge, want.MaxAge))
	}
	for _, l := range []struct {
		what string
		n    int64
	}{{"max_msgs", have.MaxMsgs}, {"max_bytes", have.MaxBytes}, {"max_msgs_per_subject", have.MaxMsgsPerSubject}} {
		if l.n > 0 {
			bad = append(bad, fmt.Sprintf("%s %d (old entries dropped)", l.what, l.n))
		}
	}
	return bad
}

// Last reads the subject's newest message.
func (s *StreamStore) Last(ctx context.Context) (*Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readLast(ctx)
}

func (s *StreamStore) readLast(ctx context.Context) (*Entry, error) {
	s.known = false
	m, err := s.stream.GetLastMsgForSubject(ctx, s.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		s.known, s.lastEntry, s.lastMsg = true, 0, 0
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit stream %s: its newest entry: %w", s.name, err)
	}
	var e Entry
	if err := json.Unmarshal(m.Data, &e); err != nil {
		return nil, fmt.Errorf("audit stream %s: its message %d is not an entry: %w", s.name, m.Sequence, err)
	}
	s.known, s.lastEntry, s.lastMsg = true, e.Seq, m.Sequence
	return &e, nil
}

// Write publishes e expecting the subject's last message to be the entry before it: one that
// another writer appended meanwhile makes the stream refuse it (ErrConflict).
func (s *StreamStore) Write(ctx context.Context, e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.known || s.lastEntry != e.Seq-1 {
		if _, err := s.readLast(ctx); err != nil {
			return err
		}
		if s.lastEntry != e.Seq-1 {
			return fmt.Errorf("%w: the stream's newest entry is %d, not %d", ErrConflict, s.lastEntry, e.Seq-1)
		}
	}
	ack, err := s.js.Publish(ctx, s.subject, b, jetstream.WithExpectStream(s.name), jetstream.WithExpectLastSequencePerSubject(s.lastMsg))
	if err != nil {
		s.known = false
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return fmt.Errorf("audit stream %s: %w", s.name, err)
	}
	s.lastEntry, s.lastMsg = e.Seq, ack.Sequence
	return nil
}

// Each reads every entry the stream holds, in order.
func (s *StreamStore) Each(ctx context.Context, fn func(raw []byte) error) error {
	_, err := s.EachFrom(ctx, 0, fn)
	return err
}

// EachFrom reads the entries after stream sequence from, as many as the stream held when it
// was called, and returns the sequence of the last one read: a reader that keeps it reads only
// what was appended since (Index). A stream whose last sequence is below from was replaced: it
// returns ErrRewound.
func (s *StreamStore) EachFrom(ctx context.Context, from int64, fn func(raw []byte) error) (int64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return from, fmt.Errorf("audit stream %s: %w", s.name, err)
	}
	end := info.State.LastSeq
	switch {
	case end < uint64(from):
		return 0, ErrRewound
	case end == uint64(from) || info.State.Msgs == 0:
		return from, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.subject}, DeliverPolicy: jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute} // the server drops the consumer of a reader that died mid-read
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, uint64(from)+1
	}
	c, err := s.js.OrderedConsumer(ctx, s.name, cfg)
	if err != nil {
		return from, fmt.Errorf("audit stream %s: reading it: %w", s.name, err)
	}
	defer func() {
		// a reader every BanRefresh would leave a consumer a minute each
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = s.js.DeleteConsumer(dctx, s.name, c.CachedInfo().Name)
	}()
	at, err := readUntil(ctx, c, uint64(from), end, fn)
	if err != nil {
		return int64(at), fmt.Errorf("audit stream %s: reading it: %w", s.name, err)
	}
	return int64(at), nil
}

// readUntil hands fn the consumer's messages until stream sequence end and returns the last
// one's sequence (at, when none came).
func readUntil(ctx context.Context, c jetstream.Consumer, at, end uint64, fn func(raw []byte) error) (uint64, error) {
	for at < end {
		if err := ctx.Err(); err != nil {
			return at, err
		}
		// as many as are left, so that the fetch returns once they came rather than at its wait
		batch, err := c.Fetch(int(min(end-at, streamReadBatch)), jetstream.FetchMaxWait(streamReadWait))
		if err != nil {
			return at, err
		}
		n, pending := 0, uint64(1)
		var ferr error
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return at, err
			}
			if ferr == nil {
				ferr = fn(m.Data())
			}
			n, at, pending = n+1, md.Sequence.Stream, md.NumPending
		}
		if ferr != nil {
			return at, ferr
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return at, err
		}
		if n == 0 || pending == 0 {
			break // what was left to read aged out meanwhile
		}
	}
	return at, nil
}

// Close does nothing: the connection is its opener's.
func (s *StreamStore) Close() error { return nil }
