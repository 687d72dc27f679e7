package devstack

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// FleetMember is one real go-choria server process of the demo fleet.
type FleetMember struct {
	Identity   string
	Binary     string
	Dir        string
	ConfigFile string
	LogFile    string
	cmd        *exec.Cmd
	done       chan struct{}
	stopping   atomic.Bool // Kill or Stop ended it: not reported
}

// Fleet is a set of server processes, each started from this project's binary (`fleet-server`),
// each with its own identity and configuration directory.
type Fleet struct {
	Self    string // path of the choria-provisioner binary
	Dir     string
	JWTFile string
	Prefix  string // prepended to every identity
	// OwnBinary gives every server its own copy of Self, so that release_update replaces only it.
	OwnBinary bool
	// OnExit hears of a member that ended other than by Kill or Stop (a crash, a shutdown the
	// provisioner asked for), with its last output.
	OnExit  func(ChildExit)
	mu      sync.Mutex
	Members []*FleetMember
}

// Identity names demo server i.
func (f *Fleet) Identity(i int) string { return fmt.Sprintf("%snode-%03d.demo.example", f.Prefix, i) }

// Start launches server i (identities are stable per index, so a restarted stack reuses them).
func (f *Fleet) Start(i int) (*FleetMember, error) {
	id := f.Identity(i)
	dir := filepath.Join(f.Dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	m := &FleetMember{Identity: id, Dir: dir, ConfigFile: filepath.Join(dir, "server.conf"), LogFile: filepath.Join(dir, "server.log"), done: make(chan struct{})}
	bin := f.Self
	if f.OwnBinary {
		bin = filepath.Join(dir, "choria-server")
		if err := copyFile(f.Self, bin); err != nil {
			return nil, err
		}
	}
	m.Binary = bin
	cmd := exec.Command(bin, "fleet-server", "--identity", id, "--config", m.ConfigFile, "--provisioning-jwt", f.JWTFile, "--logfile", m.LogFile)
	cmd.Dir = dir
	out, err := os.OpenFile(filepath.Join(dir, "process.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	// its own process group: Ctrl-C of the dev command reaches it through Stop, not twice
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting server %s: %w", id, err)
	}
	m.cmd = cmd
	go func() {
		err := cmd.Wait()
		out.Close()
		if f.OnExit != nil && !m.stopping.Load() {
			f.OnExit(ChildExit{Child: "server " + id, Err: fmt.Errorf("exited: %v; its last output: %q", err, m.lastOutput())})
		}
		close(m.done)
	}()
	f.mu.Lock()
	f.Members = append(f.Members, m)
	f.mu.Unlock()
	return m, nil
}

// StartN launches servers 0..n-1.
func (f *Fleet) StartN(n int) error {
	for i := 0; i < n; i++ {
		if _, err := f.Start(i); err != nil {
			return err
		}
	}
	return nil
}

// Kill stops one member at once, as a vanished host.
func (m *FleetMember) Kill() {
	m.stopping.Store(true)
	if m.cmd != nil && m.cmd.Process != nil {
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.done
	}
}

// Stop terminates every member: SIGTERM, then SIGKILL after a grace period.
func (f *Fleet) Stop(grace time.Duration) {
	f.mu.Lock()
	members := append([]*FleetMember(nil), f.Members...)
	f.mu.Unlock()
	for _, m := range members {
		m.stopping.Store(true)
		if m.cmd != nil && m.cmd.Process != nil {
			_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	deadline := time.After(grace)
	for _, m := range members {
		select {
		case <-m.done:
		case <-deadline:
			m.Kill()
		}
	}
}

// Wait blocks until ctx ends; members run until Stop.
func (f *Fleet) Wait(ctx context.Context) { <-ctx.Done() }

// Provisioned reports whether m has been given a configuration that turns provisioning off and
// its credentials (a server JWT, or a certificate in pki mode): what a successful configure
// leaves behind.
func Provisioned(m *FleetMember) bool {
	b, err := os.ReadFile(m.ConfigFile)
	if err != nil || !strings.Contains(string(b), "plugin.choria.server.provision=false") {
		return false
	}
	for _, f := range []string{"server.jwt", filepath.Join("ssl", "certificate.pem")} {
		if _, err := os.Stat(filepath.Join(m.Dir, f)); err == nil {
			return true
		}
	}
	return false
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// Exited reports whether the server process has ended.
func (m *FleetMember) Exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// lastOutput is the end of the member's process output and of its server log.
func (m *FleetMember) lastOutput() string {
	var parts []string
	for _, f := range []string{filepath.Join(m.Dir, "process.log"), m.LogFile} {
		if t := fileTail(f, 1024); t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n")
}

// fileTail is the last n bytes of a file ("" when it cannot be read).
func fileTail(file string, n int64) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(b))
}
