package auditlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

const testStream = "AUDIT-TEST"

// jetStreamServer is an in-process NATS server with JetStream on a file store in the test's
// directory; it stops with the test.
func jetStreamServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(s.Shutdown)
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	return s
}

func connect(t *testing.T, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func openStream(t *testing.T, s *server.Server) *StreamStore {
	t.Helper()
	st, err := OpenStream(context.Background(), connect(t, s), testStream, 48*time.Hour)
	require.NoError(t, err)
	return st
}

// conflicts counts the writes the stream refused because another writer came first.
type conflicts struct {
	*StreamStore
	mu sync.Mutex
	n  int
}

func (c *conflicts) Write(ctx context.Context, e Entry) error {
	err := c.StreamStore.Write(ctx, e)
	if errors.Is(err, ErrConflict) {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return err
}

func (c *conflicts) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func issue(t *testing.T, l *Log, identity string) Entry {
	t.Helper()
	e, err := l.Append(context.Background(), Entry{Kind: KindIssued, Identity: identity, Expires: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	return e
}

// The stream is created with the settings that keep the audit; the chain appended to it
// verifies, and a log opened again on it continues the chain.
func TestStreamStoreCreatesTheStreamAndChains(t *testing.T) {
	s := jetStreamServer(t)
	st := openStream(t, s)
	cfg := st.stream.CachedInfo().Config
	require.Equal(t, []string{StreamSubject}, cfg.Subjects)
	require.Equal(t, jetstream.FileStorage, cfg.Storage)
	require.Equal(t, jetstream.DiscardOld, cfg.Discard)
	require.Equal(t, 48*time.Hour, cfg.MaxAge)
	require.True(t, cfg.DenyDelete)
	require.True(t, cfg.DenyPurge)

	l, err := New(testKey, st, "replica-a")
	require.NoError(t, err)
	for i := range 3 {
		require.Equal(t, uint64(i+1), issue(t, l, fmt.Sprintf("n%d.example", i)).Seq)
	}
	again, err := New(testKey, openStream(t, s), "replica-b")
	require.NoError(t, err)
	require.Equal(t, uint64(4), issue(t, again, "n3.example").Seq, "a log on the existing stream chains after its newest entry")

	r, err := Verify(context.Background(), testKey, st)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	require.Equal(t, 4, r.Entries)
	require.Equal(t, uint64(4), r.Last)
}

// Two replicas appending to the one stream: a writer whose view is stale is refused by the
// stream (ErrConflict), rereads and chains after the other's entry; many appends at once from
// both all succeed and the chain has no fork.
func TestStreamStoreTwoWritersNeverFork(t *testing.T) {
	s := jetStreamServer(t)
	a, b := &conflicts{StreamStore: openStream(t, s)}, &conflicts{StreamStore: openStream(t, s)}
	la, err := New(testKey, a, "replica-a")
	require.NoError(t, err)
	lb, err := New(testKey, b, "replica-b")
	require.NoError(t, err)

	issue(t, la, "a1.example")
	issue(t, lb, "b1.example")
	require.Equal(t, uint64(3), issue(t, la, "a2.example").Seq, "a's view of the newest entry was its own, stale")
	require.Equal(t, 1, a.count(), "the stream refused a's stale append once")

	const each = 25
	var wg sync.WaitGroup
	for _, l := range []*Log{la, lb} {
		for range 2 {
			wg.Go(func() {
				for i := range each {
					_, err := l.Append(context.Background(), Entry{Kind: KindIssued, Identity: fmt.Sprintf("%s-%d.example", l.by, i)})
					if err != nil {
						t.Errorf("append: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	r, err := Verify(context.Background(), testKey, a)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	require.Equal(t, 3+4*each, r.Entries)
	require.Equal(t, uint64(3+4*each), r.Last)
	t.Logf("conflicts settled by the stream: a %d, b %d", a.count(), b.count())
}

// A message cannot be edited in the stream, but one can be published beside the chain: an
// entry made without the key fails its MAC where it stands; the chain goes on after it.
func TestStreamStoreVerifyFindsAnInsertedEntry(t *testing.T) {
	s := jetStreamServer(t)
	st := openStream(t, s)
	l, err := New(testKey, st, "replica-a")
	require.NoError(t, err)
	prev := issue(t, l, "n0.example")
	forged := Entry{Seq: 2, Time: time.Now().UTC(), Kind: KindUnbanned, Identity: "stolen.example", Prev: prev.MAC}
	forged.MAC = macOf([]byte("not the provisioner's key, 32 bytes"), forged)
	b, err := json.Marshal(forged)
	require.NoError(t, err)
	_, err = st.js.Publish(context.Background(), StreamSubject, b)
	require.NoError(t, err)
	issue(t, l, "n2.example")

	r, err := Verify(context.Background(), testKey, st)
	require.NoError(t, err)
	require.Equal(t, 3, r.Entries)
	require.Len(t, r.Problems, 1, "%v", r.Problems)
	require.Equal(t, 2, r.Problems[0].Line)
	require.Contains(t, r.Problems[0].What, "MAC does not verify")
	entries, unproven, err := Entries(context.Background(), testKey, st)
	require.NoError(t, err)
	require.Equal(t, 1, unproven)
	require.Len(t, entries, 2)
}

// The stream refuses to purge or delete what it holds, whoever asks (this connection has every
// right on the server).
func TestStreamStoreRefusesPurgeAndDelete(t *testing.T) {
	s := jetStreamServer(t)
	st := openStream(t, s)
	l, err := New(testKey, st, "replica-a")
	require.NoError(t, err)
	issue(t, l, "n0.example")
	issue(t, l, "n1.example")
	ctx := context.Background()

	err = st.stream.Purge(ctx)
	require.Error(t, err)
	t.Logf("purge: %v", err)
	require.ErrorContains(t, err, "purge")
	for _, del := range []func(context.Context, uint64) error{st.stream.DeleteMsg, st.stream.SecureDeleteMsg} {
		err = del(ctx, 1)
		require.Error(t, err)
		t.Logf("delete: %v", err)
		require.ErrorContains(t, err, "delete")
	}
	info, err := st.stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs)
	r, err := Verify(ctx, testKey, st)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	require.Equal(t, 2, r.Entries)
}

// An existing stream that would keep the audit less surely is refused, naming why; one that
// keeps it longer is taken as it is.
func TestOpenStreamRefusesAWeakerStream(t *testing.T) {
	s := jetStreamServer(t)
	nc := connect(t, s)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()

	weak := StreamConfig("WEAK", time.Hour)
	weak.DenyDelete, weak.DenyPurge, weak.MaxMsgs = false, false, 100
	_, err = js.CreateStream(ctx, weak)
	require.NoError(t, err)
	_, err = OpenStream(ctx, nc, "WEAK", time.Hour)
	require.ErrorContains(t, err, "deny_delete off")
	require.ErrorContains(t, err, "deny_purge off")
	require.ErrorContains(t, err, "max_msgs 100")
	cfg, err := js.Stream(ctx, "WEAK")
	require.NoError(t, err)
	require.False(t, cfg.CachedInfo().Config.DenyDelete, "the stream is left as it was")
	require.NoError(t, js.DeleteStream(ctx, "WEAK")) // streams of one account take distinct subjects

	long := StreamConfig("LONG", 1000*time.Hour)
	long.Subjects = []string{"other.subject"}
	_, err = js.CreateStream(ctx, long)
	require.NoError(t, err)
	_, err = OpenStream(ctx, nc, "LONG", 10*time.Hour)
	require.ErrorContains(t, err, "subjects [other.subject]")

	require.NoError(t, js.DeleteStream(ctx, "LONG"))
	_, err = js.CreateStream(ctx, StreamConfig("LONG", 1000*time.Hour))
	require.NoError(t, err)
	st, err := OpenStream(ctx, nc, "LONG", 10*time.Hour)
	require.NoError(t, err, "a longer max_age keeps more")
	require.Equal(t, 1000*time.Hour, st.stream.CachedInfo().Config.MaxAge, "and is not shortened")
	_, err = OpenStream(ctx, nc, "LONG", 2000*time.Hour)
	require.ErrorContains(t, err, "max_age 1000h0m0s, shorter than audit.max_age 2000h0m0s")
}

// The index follows the stream's end: a read after appends hands over only the new entries,
// and a stream replaced (shorter than what was read) says so.
func TestStreamStoreTailsForTheIndex(t *testing.T) {
	s := jetStreamServer(t)
	st := openStream(t, s)
	l, err := New(testKey, st, "replica-a")
	require.NoError(t, err)
	ctx := context.Background()
	read := func(from int64) (int64, []string) {
		var ids []string
		at, err := st.EachFrom(ctx, from, func(raw []byte) error {
			var e Entry
			require.NoError(t, json.Unmarshal(raw, &e))
			ids = append(ids, e.Identity)
			return nil
		})
		require.NoError(t, err)
		return at, ids
	}
	at, ids := read(0)
	require.Zero(t, at)
	require.Empty(t, ids)
	for i := range 600 { // more than one batch
		issue(t, l, fmt.Sprintf("n%d.example", i))
	}
	at, ids = read(0)
	require.Equal(t, int64(600), at)
	require.Len(t, ids, 600)
	require.Equal(t, "n599.example", ids[599])
	issue(t, l, "late.example")
	at, ids = read(at)
	require.Equal(t, int64(601), at)
	require.Equal(t, []string{"late.example"}, ids)
	at, ids = read(at)
	require.Equal(t, int64(601), at)
	require.Empty(t, ids)
	_, err = st.EachFrom(ctx, 700, func([]byte) error { return nil })
	require.ErrorIs(t, err, ErrRewound)

	x := NewIndex(testKey, st, 0)
	hs, err := x.State(ctx, "late.example")
	require.NoError(t, err)
	require.False(t, hs.Issued.IsZero(), "the index reads the stream")
}
