package auditlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// maxEntry bounds one line of the file: an entry is a few hundred bytes.
const maxEntry = 64 << 10

// FileStore keeps the chain as JSON lines in a file that only grows: opened for appending, each
// entry written in one write and synced before Write returns. One writer per file (a replica's
// own); the log pipeline or a shipper takes it from there.
type FileStore struct {
	path string
	f    *os.File
}

// OpenFile opens (creating, mode 0640) the audit file at path for appending.
func OpenFile(path string) (*FileStore, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	return &FileStore{path: path, f: f}, nil
}

// ReadFile is a FileStore for reading only (audit --verify).
func ReadFile(path string) *FileStore { return &FileStore{path: path} }

// Last reads the file's last entry.
func (s *FileStore) Last(ctx context.Context) (*Entry, error) {
	var last []byte
	err := s.Each(ctx, func(raw []byte) error {
		last = append(last[:0], raw...)
		return nil
	})
	if err != nil || last == nil {
		return nil, err
	}
	var e Entry
	if err := json.Unmarshal(last, &e); err != nil {
		return nil, fmt.Errorf("audit file %s: its last line is not an entry: %w", s.path, err)
	}
	return &e, nil
}

// Write appends e as one line and syncs the file.
func (s *FileStore) Write(_ context.Context, e Entry) error {
	if s.f == nil {
		return fmt.Errorf("audit file %s: opened for reading only", s.path)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := s.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("audit file %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("audit file %s: %w", s.path, err)
	}
	return nil
}

// Each reads the file's lines in order.
func (s *FileStore) Each(ctx context.Context, fn func(raw []byte) error) error {
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	defer f.Close()
	return eachLine(ctx, f, fn)
}

func eachLine(ctx context.Context, r io.Reader, fn func(raw []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEntry)
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			if err := fn(line); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// Close closes the file.
func (s *FileStore) Close() error {
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}

// WriterStore writes the chain to a stream it cannot read back (standard output, for the log
// pipeline): each process begins its chain with an opened entry.
type WriterStore struct {
	w io.Writer
}

// NewWriterStore is a WriterStore on w.
func NewWriterStore(w io.Writer) *WriterStore { return &WriterStore{w: w} }

// Last is nil: the chain begins anew with this writer.
func (s *WriterStore) Last(context.Context) (*Entry, error) { return nil, nil }

// Write writes e as one line.
func (s *WriterStore) Write(_ context.Context, e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = s.w.Write(append(b, '\n'))
	return err
}

// Each reads nothing: what was written is the pipeline's (verify its copy as a file).
func (s *WriterStore) Each(context.Context, func([]byte) error) error { return nil }

func (s *WriterStore) writeOnly() {}

// Close does nothing: the writer is the process's.
func (s *WriterStore) Close() error { return nil }
