package auditlog

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Log appends entries to a Store, each chained to the one before and authenticated with the key.
type Log struct {
	key   []byte
	store Store
	by    string
	now   func() time.Time

	mu   sync.Mutex
	last *Entry // the newest entry this writer knows of; nil: read it from the store
}

// New is a Log over store, its entries made by by (a replica's name) and authenticated with key.
func New(key []byte, store Store, by string) (*Log, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("audit key: %d bytes, at least 32 needed", len(key))
	}
	return &Log{key: key, store: store, by: by, now: time.Now}, nil
}

// ParseKey reads an audit key file's content: 64 or more hex characters on one line.
func ParseKey(s string) ([]byte, error) {
	key, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("not hex: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("%d bytes, at least 32 needed (openssl rand -hex 32)", len(key))
	}
	return key, nil
}

// conflictRetries bounds how often an append loses the race to another writer of a shared store;
// between tries it waits a random while, up to conflictBackoff doubled each time (at most 64 ms),
// so that writers racing in step spread out instead of colliding again.
const (
	conflictRetries = 32
	conflictBackoff = time.Millisecond
)

// Append chains e after the newest entry and writes it; when Append returns nil the entry is
// durable in the store. Its error wraps ErrUnwritable.
func (l *Log) Append(ctx context.Context, e Entry) (Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.Time.IsZero() {
		e.Time = l.now().UTC()
	}
	if e.By == "" {
		e.By = l.by
	}
	for try := range conflictRetries {
		if l.last == nil {
			last, err := l.store.Last(ctx)
			if err != nil {
				return Entry{}, fmt.Errorf("%w: reading its newest entry: %w", ErrUnwritable, err)
			}
			if last == nil {
				if last, err = l.open(ctx); err != nil {
					return Entry{}, fmt.Errorf("%w: %w", ErrUnwritable, err)
				}
			}
			l.last = last
		}
		e.Seq, e.Prev = l.last.Seq+1, l.last.MAC
		e.MAC = ""
		e.MAC = l.mac(e)
		err := l.store.Write(ctx, e)
		switch {
		case err == nil:
			l.last = &e
			return e, nil
		case isConflict(err):
			l.last = nil // another replica wrote: read the newest and chain after it
			wait := time.Duration(rand.Int64N(int64(conflictBackoff << min(try, 6))))
			select {
			case <-ctx.Done():
				return Entry{}, fmt.Errorf("%w: %w", ErrUnwritable, ctx.Err())
			case <-time.After(wait):
			}
		default:
			l.last = nil // what the store holds now is unknown
			return Entry{}, fmt.Errorf("%w: %w", ErrUnwritable, err)
		}
	}
	return Entry{}, fmt.Errorf("%w: %d writers' entries in a row came first", ErrUnwritable, conflictRetries)
}

// open begins a chain: on a store that reads back, the chain's first entry is this one; on one
// that cannot (standard output), an opened entry first, so that Verify knows where a writer
// began and does not take it for entries removed.
func (l *Log) open(ctx context.Context) (*Entry, error) {
	if _, blind := l.store.(interface{ writeOnly() }); !blind {
		return &Entry{}, nil
	}
	e := Entry{Seq: 1, Time: l.now().UTC(), Kind: KindOpened, By: l.by}
	e.MAC = l.mac(e)
	if err := l.store.Write(ctx, e); err != nil {
		return nil, err
	}
	return &e, nil
}

func isConflict(err error) bool { return errors.Is(err, ErrConflict) }

// mac is the entry's HMAC with its mac field empty.
func (l *Log) mac(e Entry) string { return macOf(l.key, e) }

func macOf(key []byte, e Entry) string {
	e.MAC = ""
	b, err := json.Marshal(e)
	if err != nil {
		panic("auditlog: an entry that does not encode: " + err.Error()) // only strings and times
	}
	h := hmac.New(sha256.New, key)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// Close closes the store.
func (l *Log) Close() error { return l.store.Close() }
