package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/choria-temporal/provisioner/internal/service"
)

// TemporalOptions start the Temporal CLI's dev server.
type TemporalOptions struct {
	Binary    string // the temporal CLI built from tools/go.mod; never downloaded
	DBFile    string // empty: in memory
	UI        bool
	UIPort    int
	Port      int
	Namespace string
	Output    io.Writer
	Retention time.Duration
	// UICodecEndpoint points the Web UI at a remote codec server.
	UICodecEndpoint string
	// DynamicConfig are extra KEY=JSON dynamic config values (tuning experiments).
	DynamicConfig []string
	// SQLitePragmas are extra KEY=VALUE pragmas for a DBFile (tuning experiments).
	SQLitePragmas []string
	// Env is extra KEY=VALUE environment of the server process (tuning experiments: GOGC).
	Env []string
	// MetricsPort is the server's own Prometheus /metrics (0: a random port, as the CLI does);
	// the bench reads Temporal's persistence operations per host from it.
	MetricsPort int
}

// FindTemporalBinary looks for the temporal CLI next to this executable, then in .bin/ of the
// working directory and its parents (go test runs in package directories).
func FindTemporalBinary() (string, error) {
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "temporal"))
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			candidates = append(candidates, filepath.Join(dir, ".bin", "temporal"))
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	return "", errors.New("the temporal CLI was not found (looked beside this binary and in .bin/): run `make tools`")
}

// StartTemporal starts the dev server, registers the provisioner's search attributes and sets
// the namespace retention.
func StartTemporal(ctx context.Context, o TemporalOptions) (*DevServer, error) {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Port != 0 {
		return startTemporal(ctx, o)
	}
	// a port FreePort found free can be taken again before the server binds it (the tests pick
	// many): a server that never came up gets one more try on another port
	var err error
	for try := 0; try < 2; try++ {
		if o.Port, err = FreePort(); err != nil {
			return nil, err
		}
		var srv *DevServer
		if srv, err = startTemporal(ctx, o); err == nil {
			return srv, nil
		}
	}
	return nil, err
}

func startTemporal(ctx context.Context, o TemporalOptions) (*DevServer, error) {
	out := &tailWriter{max: 4096}
	p := devServerProcess{
		binary: o.Binary,
		client: client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", o.Port), Namespace: o.Namespace, Logger: log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))},
		args: []string{"--ip", "127.0.0.1", "--port", fmt.Sprint(o.Port), "--namespace", o.Namespace, "--log-level", "error",
			"--dynamic-config-value", "frontend.enableServerVersionCheck=false"},
		out: out, tail: out,
	}
	if o.Output != nil {
		p.out = io.MultiWriter(o.Output, out)
	}
	var err error
	if p.env, err = serverEnv(o.Env); err != nil {
		return nil, err
	}
	if !o.UI {
		p.args = append(p.args, "--headless")
	} else if o.UIPort != 0 {
		p.args = append(p.args, "--ui-port", fmt.Sprint(o.UIPort))
	}
	if o.DBFile != "" {
		p.args = append(p.args, "--db-filename", o.DBFile)
		for _, kv := range append(filePragmas(), o.SQLitePragmas...) {
			p.args = append(p.args, "--sqlite-pragma", kv)
		}
	}
	if o.UICodecEndpoint != "" {
		p.args = append(p.args, "--ui-codec-endpoint", o.UICodecEndpoint)
	}
	if o.MetricsPort != 0 {
		p.args = append(p.args, "--metrics-port", fmt.Sprint(o.MetricsPort))
	}
	// eager activities: a workflow task that schedules an activity on its own task queue gets
	// the activity back in its response, skipping a matching dispatch (the Go SDK asks for them
	// by default). Its gain measured here is within the noise (docs/performance.md); it removes
	// work, so it stays on.
	for _, kv := range append([]string{"system.enableActivityEagerExecution=true"}, o.DynamicConfig...) {
		p.args = append(p.args, "--dynamic-config-value", kv)
	}
	srv, err := startDevServer(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("starting Temporal dev server on port %d: %w; its last output: %q", o.Port, err, out.String())
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := service.Setup(sctx, srv.Client(), o.Namespace, o.Retention); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	return srv, nil
}

// filePragmas are the dev server's SQLite settings for a database file. WAL with
// synchronous=normal: 2.3x the throughput of SQLite's defaults (docs/architecture.md); a commit
// survives a crash of the server, and only an OS crash or power loss can take back the
// transactions written since the WAL was last synced. The server does all its persistence on one
// connection, so whatever holds that connection holds every workflow: a checkpoint every 10,000
// pages (~40 MiB of WAL) instead of 1,000, and a 64 MiB page cache instead of 2 MiB, because
// each checkpoint's fsyncs and the pages a burst re-reads stalled it; 1.10-1.14x the rate of a
// 500-host burst on a slow disk. The price: a rarer checkpoint holds the connection longer, and
// at 5 arrivals/s the slowest 1 % of hosts took ~190 ms instead of ~140 (docs/performance.md).
func filePragmas() []string {
	return []string{"journal_mode=wal", "synchronous=normal", "wal_autocheckpoint=10000", "cache_size=-65536"}
}

// tailWriter keeps the last max bytes written to it: the dev server's last words when it fails
// to start.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
