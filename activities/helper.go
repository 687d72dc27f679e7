package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Output caps: a helper reply is a configuration, not a data set, and a runaway helper must not
// take the worker's memory with it.
const (
	DefaultHelperStdoutLimit = 4 << 20
	helperStderrLimit        = 16 << 10
	helperStderrNote         = 300 // bytes of stderr an error quotes
)

// HelperRunner runs the site helper with the Choria Provisioner's contract: one JSON object on
// stdin, one on stdout, exit 0, within the timeout.
type HelperRunner struct {
	Command     []string
	Timeout     time.Duration
	StdoutLimit int
	// Env names the variables of this process's environment the helper gets (those set); it
	// gets no other, so the provisioner's keys (PROVISIONER_CODEC_KEY, the Temporal API key, a
	// token in the environment) never reach the site's code.
	Env []string
	// Credential is the user the helper runs as (helper_user), with no supplementary group:
	// the provisioner's key files, its user's, are out of its reach. nil: this process's user.
	Credential *syscall.Credential
}

// environment is the helper's environment: the named variables of this process's, and only them.
func (h *HelperRunner) environment() []string {
	env := make([]string, 0, len(h.Env)) // not nil: a nil Env would inherit everything
	for _, name := range h.Env {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// Run executes the helper once. Once it exits, or on timeout, the helper's whole process group is
// killed, so a shell wrapper cannot leave its children running.
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: h.Credential}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// After the kill, stop waiting for pipes that an escaped grandchild may still hold open.
	cmd.WaitDelay = time.Second
	cmd.Env = h.environment()
	cmd.Stdin = bytes.NewReader(in)
	stdout := &capped{limit: limit, stop: true}
	stderr := &capped{limit: helperStderrLimit}
	cmd.Stdout = stdout
	cmd.Stderr = stderr

	err = cmd.Run()
	if cmd.Process != nil {
		// whatever the helper left behind goes with it: a child it started in the background
		// would outlive every call (the group's ID is not reused while a member lives)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
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
