package auditlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"syscall"
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

// Last reads the file's last entry, from its tail.
func (s *FileStore) Last(context.Context) (*Entry, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	defer f.Close()
	return lastEntry(f, s.path)
}

// lastEntry is the last line of f as an entry; nil when f holds none.
func lastEntry(f *os.File, path string) (*Entry, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit file %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("audit file %s: not a regular file", path)
	}
	size := st.Size()
	from := max(size-maxEntry, 0)
	buf := make([]byte, size-from)
	if _, err := f.ReadAt(buf, from); err != nil && err != io.EOF {
		return nil, fmt.Errorf("audit file %s: %w", path, err)
	}
	buf = bytes.TrimRight(buf, "\n")
	if len(buf) == 0 {
		return nil, nil
	}
	line := buf[bytes.LastIndexByte(buf, '\n')+1:]
	var e Entry
	if err := json.Unmarshal(line, &e); err != nil {
		return nil, fmt.Errorf("audit file %s: its last line is not an entry: %w", path, err)
	}
	return &e, nil
}

// Write appends e as one line and syncs the file, under an exclusive lock on it: the workers
// and the operator's commands append to the same file, and an entry that is not the next after
// the file's last is refused (ErrConflict), so the chain never forks.
func (s *FileStore) Write(_ context.Context, e Entry) error {
	if s.f == nil {
		return fmt.Errorf("audit file %s: opened for reading only", s.path)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(s.f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("audit file %s: locking: %w", s.path, err)
	}
	defer syscall.Flock(int(s.f.Fd()), syscall.LOCK_UN)
	r, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	last, err := lastEntry(r, s.path)
	r.Close()
	if err != nil {
		return err
	}
	if have := lastSeq(last); have != e.Seq-1 {
		return fmt.Errorf("%w: the file's last entry is %d, not %d", ErrConflict, have, e.Seq-1)
	}
	if _, err := s.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("audit file %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("audit file %s: %w", s.path, err)
	}
	return nil
}

func lastSeq(e *Entry) uint64 {
	if e == nil {
		return 0
	}
	return e.Seq
}

// Each reads the file's lines in order.
func (s *FileStore) Each(ctx context.Context, fn func(raw []byte) error) error {
	_, err := s.EachFrom(ctx, 0, fn)
	return err
}

// EachFrom reads the complete lines after byte offset from and returns the offset after the
// last of them: a reader that keeps it reads only what was appended since (Index). A file
// shorter than from was replaced (rotated): it returns ErrRewound.
func (s *FileStore) EachFrom(ctx context.Context, from int64, fn func(raw []byte) error) (int64, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return from, fmt.Errorf("audit file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return from, fmt.Errorf("audit file %s: %w", s.path, err)
	}
	if st.Size() < from {
		return 0, ErrRewound
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return from, fmt.Errorf("audit file %s: %w", s.path, err)
	}
	r := bufio.NewReaderSize(f, 64<<10)
	at := from
	for {
		if err := ctx.Err(); err != nil {
			return at, err
		}
		line, err := r.ReadSlice('\n')
		if err == io.EOF {
			return at, nil // a line not yet ended is read once it is
		}
		if err != nil {
			return at, fmt.Errorf("audit file %s: %w", s.path, err)
		}
		at += int64(len(line))
		if line = bytes.TrimSpace(line); len(line) > 0 {
			if err := fn(line); err != nil {
				return at, err
			}
		}
	}
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
