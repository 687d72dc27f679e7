package auditlog

import (
	"context"
	"io"
	"path/filepath"
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
