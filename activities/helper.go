package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Output caps: a helper reply is a configuration, not a data set, and a runaway helper must not
// take the worker's memory with it.
const (
	DefaultHelperStdoutLimit = 4 << 20
	helperStderrLimit        = 16 << 10
)

// HelperRunner runs the site helper with the Choria Provisioner's contract: one JSON object on
// stdin, one on stdout, exit 0, within the timeout.
type HelperRunner struct {
	Command     []string
	Timeout     time.Duration
	StdoutLimit int
}

// Run executes the helper once. On timeout the helper's whole process group is killed, so a shell
// wrapper cannot leave its children running.
func (h *HelperRunner) Run(ctx context.Context, input any) (*HelperOutput, error) {
	in, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("encoding helper input: %w", err)
	}
	limit := h.StdoutLimit
	if limit <= 0 {
		limit = DefaultHelperStdoutLimit
	}

	tctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()

	cmd := exec.CommandContext(tctx, h.Command[0], h.Command[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// After the kill, stop waiting for pipes that an escaped grandchild may still hold open.
	cmd.WaitDelay = time.Second
	cmd.Stdin = bytes.NewReader(in)
	stdout := &capped{limit: limit, stop: true}
	stderr := &capped{limit: helperStderrLimit}
	cmd.Stdout = stdout
	cmd.Stderr = stderr

	err = cmd.Run()
	switch {
	case tctx.Err() != nil && ctx.Err() == nil:
		return nil, fmt.Errorf("%w after %v (process group killed)%s", ErrHelperTimeout, h.Timeout, stderrNote(stderr))
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case stdout.overflow:
		return nil, fmt.Errorf("%w: more than %d bytes on stdout", ErrHelperTooLarge, limit)
	case err != nil:
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return nil, fmt.Errorf("%w: %v%s", ErrHelperExit, exitErr, stderrNote(stderr))
		}
		return nil, fmt.Errorf("%w: %v", ErrHelperStart, err)
	}

	res, err := DecodeHelperOutput(stdout.buf.Bytes())
	if errors.Is(err, ErrHelperEmpty) {
		return nil, fmt.Errorf("%w%s", err, stderrNote(stderr))
	}
	return res, err
}

// DecodeHelperOutput parses a helper's stdout: exactly one JSON object.
func DecodeHelperOutput(raw []byte) (*HelperOutput, error) {
	out := bytes.TrimSpace(raw)
	if len(out) == 0 {
		return nil, ErrHelperEmpty
	}
	res := &HelperOutput{}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(res); err != nil {
		return nil, fmt.Errorf("%w: %v (output starts %q)", ErrHelperDecode, err, preview(out))
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object (output starts %q)", ErrHelperDecode, preview(out))
	}
	return res, nil
}

func preview(b []byte) string {
	const n = 80
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func stderrNote(c *capped) string {
	s := strings.TrimSpace(c.buf.String())
	if s == "" {
		return ""
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return "; stderr: " + s
}

// capped keeps the first limit bytes and drops the rest, remembering that it did. With stop it
// fails the write instead, which closes the pipe so a runaway helper dies of SIGPIPE at once.
type capped struct {
	buf      bytes.Buffer
	limit    int
	stop     bool
	overflow bool
}

var errOverflow = errors.New("output limit reached")

func (c *capped) Write(p []byte) (int, error) {
	room := c.limit - c.buf.Len()
	if len(p) > room {
		c.buf.Write(p[:max(room, 0)])
		c.overflow = true
		if c.stop {
			return max(room, 0), errOverflow
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

var _ io.Writer = (*capped)(nil)

// HelperSlots bounds the helper runs of one process to workers, whichever task queue brought
// them: ten at once on two cores each took three to five times as long. A nil *HelperSlots
// bounds nothing.
type HelperSlots struct{ sem chan struct{} }

// NewHelperSlots allows n helper runs at once; n <= 0 allows any number (nil).
func NewHelperSlots(n int) *HelperSlots {
	if n <= 0 {
		return nil
	}
	return &HelperSlots{sem: make(chan struct{}, n)}
}

// WithHelperSlots bounds the helper runs of these activities (workers).
func WithHelperSlots(s *HelperSlots) Option { return func(a *Activities) { a.helpers = s } }

func (s *HelperSlots) take(ctx context.Context) error {
	if s == nil {
		return nil
	}
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *HelperSlots) release() {
	if s != nil {
		<-s.sem
	}
}
