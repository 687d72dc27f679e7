package auditlog

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var testKey = bytes.Repeat([]byte{7}, 32)

func writeChain(t *testing.T, n int) (string, *Log) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	store, err := OpenFile(path)
	require.NoError(t, err)
	l, err := New(testKey, store, "replica-a")
	require.NoError(t, err)
	for i := range n {
		_, err := l.Append(context.Background(), Entry{Kind: KindIssued, Identity: "n" + string(rune('0'+i)) + ".example",
			Expires: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
		require.NoError(t, err)
	}
	return path, l
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func rewrite(t *testing.T, path string, ls []string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(ls, "\n")+"\n"), 0o600))
}

func verifyFile(t *testing.T, path string) Report {
	t.Helper()
	r, err := Verify(context.Background(), testKey, ReadFile(path))
	require.NoError(t, err)
	return r
}

// A chain written by the provisioner verifies; one reopened continues it.
func TestAChainVerifiesAndContinuesAfterReopening(t *testing.T) {
	path, l := writeChain(t, 3)
	require.NoError(t, l.Close())
	store, err := OpenFile(path)
	require.NoError(t, err)
	again, err := New(testKey, store, "replica-a")
	require.NoError(t, err)
	e, err := again.Append(context.Background(), Entry{Kind: KindBanned, Identity: "n9.example", Reason: "stolen"})
	require.NoError(t, err)
	require.Equal(t, uint64(4), e.Seq, "the reopened log chains after the file's last entry")
	r := verifyFile(t, path)
	require.Empty(t, r.Problems)
	require.Equal(t, 4, r.Entries)
	require.Equal(t, uint64(4), r.Last)
}

// Verify names an edited, a removed and an inserted entry, each at its place.
func TestVerifyFindsEditedRemovedAndInsertedEntries(t *testing.T) {
	path, _ := writeChain(t, 5)
	orig := lines(t, path)

	edited := append([]string(nil), orig...)
	var e Entry
	require.NoError(t, json.Unmarshal([]byte(edited[1]), &e))
	e.Expires = e.Expires.AddDate(10, 0, 0)
	b, _ := json.Marshal(e)
	edited[1] = string(b)
	rewrite(t, path, edited)
	r := verifyFile(t, path)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	require.Equal(t, uint64(2), r.Problems[0].Seq)
	require.Contains(t, r.Problems[0].What, "MAC does not verify")

	removed := append(append([]string(nil), orig[:2]...), orig[3:]...)
	rewrite(t, path, removed)
	r = verifyFile(t, path)
	require.Len(t, r.Problems, 1, "%+v", r.Problems)
	require.Contains(t, r.Problems[0].What, "entries 3 to 3 are missing")

	// an entry made without the key, in the removed one's place
	forged := Entry{Seq: 3, Kind: KindUnbanned, Identity: "n9.example", MAC: strings.Repeat("0", 64)}
	require.NoError(t, json.Unmarshal([]byte(orig[1]), &e))
	forged.Prev = e.MAC
	fb, _ := json.Marshal(forged)
	inserted := append(append(append([]string(nil), orig[:2]...), string(fb)), orig[3:]...)
	rewrite(t, path, inserted)
	r = verifyFile(t, path)
	require.Len(t, r.Problems, 2, "%+v", r.Problems)
	require.Equal(t, uint64(3), r.Problems[0].Seq)
	require.Contains(t, r.Problems[0].What, "MAC does not verify")
	require.Contains(t, r.Problems[1].What, "does not follow entry 3", "the next real entry names the break")

	// the start cut off
	rewrite(t, path, orig[2:])
	r = verifyFile(t, path)
	require.Len(t, r.Problems, 1)
	require.Contains(t, r.Problems[0].What, "entries before 3 are missing")

	// another key: nothing verifies
	rewrite(t, path, orig)
	r, err := Verify(context.Background(), bytes.Repeat([]byte{8}, 32), ReadFile(path))
	require.NoError(t, err)
	require.Len(t, r.Problems, 5)
}

// A writer that cannot read its store back opens its chain with an opened entry, and Verify
// takes each such opening as a chain's start.
func TestAWriteOnlyStoreOpensItsChain(t *testing.T) {
	var buf bytes.Buffer
	for range 2 {
		l, err := New(testKey, NewWriterStore(&buf), "replica-a")
		require.NoError(t, err)
		_, err = l.Append(context.Background(), Entry{Kind: KindIssued, Identity: "n1.example"})
		require.NoError(t, err)
	}
	path := filepath.Join(t.TempDir(), "captured.jsonl")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	r := verifyFile(t, path)
	require.Empty(t, r.Problems)
	require.Equal(t, 4, r.Entries)
	require.Contains(t, lines(t, path)[0], `"kind":"opened"`)
}

// A store that cannot be written fails the append with ErrUnwritable, and the next append
// reads the store again.
func TestAnUnwritableStoreFailsTheAppend(t *testing.T) {
	path, l := writeChain(t, 1)
	require.NoError(t, os.Chmod(filepath.Dir(path), 0o500))
	t.Cleanup(func() { _ = os.Chmod(filepath.Dir(path), 0o700) })
	ro := ReadFile(path) // opened for reading only: every write fails
	bad, err := New(testKey, ro, "replica-b")
	require.NoError(t, err)
	_, err = bad.Append(context.Background(), Entry{Kind: KindIssued, Identity: "n2.example"})
	require.ErrorIs(t, err, ErrUnwritable)
	_, err = l.Append(context.Background(), Entry{Kind: KindIssued, Identity: "n3.example"})
	require.NoError(t, err, "the file's own writer still appends")
}

// Two writers of one file (a worker and the operator's command) keep one chain: the one whose
// view is stale is refused by the file and chains after the other's entry.
func TestTwoWritersOfOneFileKeepOneChain(t *testing.T) {
	path, worker := writeChain(t, 2)
	store, err := OpenFile(path)
	require.NoError(t, err)
	operator, err := New(testKey, store, "operator")
	require.NoError(t, err)
	_, err = operator.Append(context.Background(), Entry{Kind: KindBanned, Identity: "n1.example", Reason: "stolen"})
	require.NoError(t, err)
	e, err := worker.Append(context.Background(), Entry{Kind: KindIssued, Identity: "n2.example"})
	require.NoError(t, err)
	require.Equal(t, uint64(4), e.Seq, "the worker chained after the operator's entry")
	r := verifyFile(t, path)
	require.Empty(t, r.Problems)

	x := NewIndex(testKey, ReadFile(path), 0)
	st, err := x.State(context.Background(), "n1.example")
	require.NoError(t, err)
	require.True(t, st.Banned)
	require.Equal(t, "stolen", st.Reason)
	// an unban written without the key decides nothing
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	forged, _ := json.Marshal(Entry{Seq: 5, Kind: KindUnbanned, Identity: "n1.example", Prev: e.MAC, MAC: strings.Repeat("f", 64)})
	_, err = f.Write(append(forged, '\n'))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	st, err = x.State(context.Background(), "n1.example")
	require.NoError(t, err)
	require.True(t, st.Banned, "a forged unban lifts nothing")
	require.Equal(t, 1, x.Unproven())
}
