package auditlog

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// The cost of one issuance's entry in the file sink (an fsync each) and on standard output, and
// of reading a 10,000-entry file's records back: whole (a worker's first read), and after one
// entry more (what a worker reads at most every BanRefresh).
func BenchmarkAppendFile(b *testing.B) {
	store, err := OpenFile(filepath.Join(b.TempDir(), "audit.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(testKey, store, "bench")
	if err != nil {
		b.Fatal(err)
	}
	e := Entry{Kind: KindIssued, Identity: "node-000001.example.net", Signer: "ed25519:0123", Subject: "sha256:abcd", Expires: time.Now()}
	b.ResetTimer()
	for b.Loop() {
		if _, err := l.Append(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendStdout(b *testing.B) {
	l, err := New(testKey, NewWriterStore(io.Discard), "bench")
	if err != nil {
		b.Fatal(err)
	}
	e := Entry{Kind: KindIssued, Identity: "node-000001.example.net", Signer: "ed25519:0123", Subject: "sha256:abcd", Expires: time.Now()}
	for b.Loop() {
		if _, err := l.Append(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIndex10000(b *testing.B) {
	path := filepath.Join(b.TempDir(), "audit.jsonl")
	store, err := OpenFile(path)
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(testKey, store, "bench")
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		if _, err := l.Append(context.Background(), Entry{Kind: KindIssued, Identity: "node-" + string(rune('a'+i%26)) + ".example", Expires: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			if _, err := NewIndex(testKey, ReadFile(path), 0).All(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-appended", func(b *testing.B) {
		x := NewIndex(testKey, ReadFile(path), 0)
		if _, err := x.All(context.Background()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := l.Append(context.Background(), Entry{Kind: KindBanned, Identity: "node-a.example"}); err != nil {
				b.Fatal(err)
			}
			if _, err := x.All(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The identity record at rest for a fleet of 50,000: one issuance each in the file sink. What
// it costs is the file's size, a worker's first read of it (and the memory the index holds), and
// the sink's part of `hosts list --expiring 30d`; Temporal holds nothing for it.
func BenchmarkRecords50000(b *testing.B) {
	const n = 50000
	path := filepath.Join(b.TempDir(), "audit.jsonl")
	store, err := OpenFile(path)
	if err != nil {
		b.Fatal(err)
	}
	l, err := New(testKey, NewWriterStore(store.f), "bench") // unsynced: seeding, not measured
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for i := range n {
		e := Entry{Kind: KindIssued, Identity: fmt.Sprintf("node-%06d.example.net", i), Site: "bench", Workflow: fmt.Sprintf("provision-node-%06d.example.net", i),
			RunID: "0197c7c2-6f5e-7b43-9d61-1f4a2f4b9e21", Signer: "ed25519:0123456789abcdef", Subject: "sha256:" + fmt.Sprintf("%064x", i),
			Expires: now.Add(time.Duration(i) * 365 * 24 * time.Hour / n)}
		if _, err := l.Append(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			all, err := NewIndex(testKey, ReadFile(path), 0).All(context.Background())
			if err != nil || len(all) != n {
				b.Fatalf("%d records, %v", len(all), err)
			}
		}
		b.ReportMetric(float64(st.Size())/n, "file-bytes/record")
		b.ReportMetric(indexHeapBytes(b, path)/n, "held-bytes/record")
	})
	b.Run("expiring-30d", func(b *testing.B) {
		x := NewIndex(testKey, ReadFile(path), time.Hour)
		if _, err := x.All(context.Background()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			recs, err := x.Expiring(context.Background(), now.Add(30*24*time.Hour), "")
			if err != nil || len(recs) < n*29/365 {
				b.Fatalf("%d expiring, %v", len(recs), err)
			}
		}
	})
}

// indexHeapBytes is the heap an index of the file at path, read whole, keeps live.
func indexHeapBytes(b *testing.B, path string) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := NewIndex(testKey, ReadFile(path), 0)
	if _, err := x.All(context.Background()); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(x)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}
