package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
)

// DevServer is the Temporal CLI's dev server running as a child process. The SDK's
// testsuite.StartDevServer does the same but cannot give the process an environment of its own,
// which the server's garbage collector setting needs (serverEnv).
type DevServer struct {
	cmd      *exec.Cmd
	client   client.Client
	hostPort string
	tail     *tailWriter // its last output
	exited   chan struct{}
	waitErr  error // the process's exit, set before exited is closed
	stopping atomic.Bool
}

// devServerProcess describes one dev server process to start.
type devServerProcess struct {
	binary string
	args   []string // after "server start-dev"
	env    []string // KEY=VALUE on top of this process's environment
	out    io.Writer
	tail   *tailWriter // also written to out
	client client.Options
}

// startDevServer starts the process and waits until its frontend accepts a client, or the
// process exits (a port taken between choosing and binding it), or a minute passes.
func startDevServer(ctx context.Context, p devServerProcess) (*DevServer, error) {
	cmd := exec.Command(p.binary, append([]string{"server", "start-dev"}, p.args...)...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.Env = append(os.Environ(), p.env...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("running %s: %w", p.binary, err)
	}
	s := &DevServer{cmd: cmd, hostPort: p.client.HostPort, tail: p.tail, exited: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := client.DialContext(ctx, p.client)
		if err == nil {
			s.client = c
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("the dev server exited before it answered: %w", s.waitErr)
		case <-ctx.Done():
			_ = s.Stop()
			return nil, fmt.Errorf("the dev server did not answer on %s: %w", p.client.HostPort, err)
		case <-tick.C:
		}
	}
}

// Client is a client connected to the server.
func (s *DevServer) Client() client.Client { return s.client }

// FrontendHostPort is the server's gRPC address.
func (s *DevServer) FrontendHostPort() string { return s.hostPort }

// PID is the server's process ID.
func (s *DevServer) PID() int { return s.cmd.Process.Pid }

// Exited is closed when the server process has ended.
func (s *DevServer) Exited() <-chan struct{} { return s.exited }

// Err is why a server that was not stopped ended, with its last output; nil while it runs or
// after Stop.
func (s *DevServer) Err() error {
	select {
	case <-s.exited:
	default:
		return nil
	}
	if s.stopping.Load() {
		return nil
	}
	last := ""
	if s.tail != nil {
		last = s.tail.String()
	}
	return fmt.Errorf("the Temporal dev server on %s exited: %v; its last output: %q", s.hostPort, s.waitErr, last)
}

// Stop interrupts the server and waits for it to exit.
func (s *DevServer) Stop() error {
	s.stopping.Store(true)
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("interrupting the dev server: %w", err)
	}
	<-s.exited
	var exit *exec.ExitError
	if errors.As(s.waitErr, &exit) && exit.ExitCode() == -1 {
		return nil // ended by the interrupt
	}
	return s.waitErr
}

// serverEnv is the dev server's environment on top of ours. GOGC=400: the server allocates fast
// over a small live heap, and its collector took 7.5 % of its CPU at Go's default of 100; at 400
// a 500-host burst cost it ~0.9x the CPU per host at ~1.07x the rate, for ~480 instead of ~270
// MiB of RSS (twice the memory at 10,000 hosts; docs/performance.md). A GOGC set by whoever runs
// the dev stack wins.
func serverEnv(extra []string) ([]string, error) {
	var env []string
	if _, set := os.LookupEnv("GOGC"); !set {
		env = append(env, "GOGC=400")
	}
	for _, kv := range extra {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("dev server environment %q: want KEY=VALUE", kv)
		}
		env = append(env, kv)
	}
	return env, nil
}
