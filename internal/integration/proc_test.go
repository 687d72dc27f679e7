package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proc is a process the test runs as a site runs ours (a provisioner, a replica of a given build,
// the fleet simulator). It has a process group of its own, so a kill takes whatever it started
// too, and writes its output to NAME.out in the stack's directory. The test's end kills it if it
// still runs.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error       // Wait's, once exited is closed
	ended  atomic.Bool // the test ended it (kill or stop): an exit it did not ask for is news
}

// spawn starts bin with args; env is extra KEY=VALUE environment.
func (e *env) spawn(name, bin string, args []string, env ...string) *proc {
	e.t.Helper()
	out, err := os.Create(filepath.Join(e.stack.Opts.Dir, name+".out"))
	require.NoError(e.t, err)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(e.t, cmd.Start(), name)
	p := &proc{t: e.t, name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.exited)
	}()
	e.t.Cleanup(func() { _ = p.kill() })
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill is kill -9 of the process and its group, as a crash or the OOM killer ends a worker; it
// returns when the process has exited, and an error when it had already.
func (p *proc) kill() error {
	p.ended.Store(true)
	err := syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.exited
	if err != nil {
		return fmt.Errorf("kill -9 %s: %w", p.name, err)
	}
	return nil
}

// stop is how systemd stops a service: SIGTERM, then kill -9 of the group after grace. It says
// how long the process took to exit, and errors when it had to be killed.
func (p *proc) stop(grace time.Duration) (time.Duration, error) {
	p.ended.Store(true)
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("SIGTERM %s: %w", p.name, err)
	}
	select {
	case <-p.exited:
		return time.Since(sent), nil
	case <-time.After(grace):
		_ = p.kill()
		return time.Since(sent), fmt.Errorf("%s did not stop within %v of SIGTERM", p.name, grace)
	}
}

// processProvisioner runs `choria-provisioner run` on the stack's configuration, so a test can
// kill it; env is PROVISIONER_* overrides of the configuration. Its log is NAME.log.
func (e *env) processProvisioner(name string, env ...string) *proc {
	e.t.Helper()
	return e.spawn(name, selfBinary, []string{"run", "--config", e.stack.ConfigFile},
		append([]string{"PROVISIONER_LOGFILE=" + filepath.Join(e.stack.Opts.Dir, name+".log")}, env...)...)
}

// runBinary runs bin and returns its combined output and exit code.
func runBinary(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}
