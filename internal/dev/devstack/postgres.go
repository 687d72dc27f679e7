package devstack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// PostgresBinDirEnv names a directory holding initdb, postgres and pg_isready, overriding the search.
const PostgresBinDirEnv = "PROVISIONER_PG_BINDIR"

// FindPostgres returns the directory of the PostgreSQL server binaries: $PROVISIONER_PG_BINDIR,
// else the newest /usr/lib/postgresql/<major>/bin (Debian's packages keep them off PATH), else
// the directory of initdb on PATH.
func FindPostgres() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres", "pg_isready"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv(PostgresBinDirEnv); dir != "" {
		if !has(dir) {
			return "", fmt.Errorf("%s=%s holds no initdb, postgres and pg_isready", PostgresBinDirEnv, dir)
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL server binaries not found (looked in $" + PostgresBinDirEnv + ", /usr/lib/postgresql/*/bin and PATH): apt-get install postgresql (make deps)")
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Postgres is a throwaway PostgreSQL cluster on 127.0.0.1, in a directory of its own that Stop
// removes. As root it runs as the postgres system user (initdb and postgres refuse root).
type Postgres struct {
	BinDir   string
	Dir      string // the cluster's own temporary directory: data/, postgres.log
	Port     int
	User     string // superuser made by initdb, password authenticated over TCP
	Password string
	cmd      *exec.Cmd
	done     chan error
	log      *os.File
	cred     *syscall.Credential // the postgres user's when running as root
	settings []string            // KEY=VALUE given to postgres as -c (tuning)
}

// StartPostgres makes a new cluster with initdb and starts it on a free loopback port; settings
// (KEY=VALUE, e.g. synchronous_commit=off) are given to the server as -c options.
func StartPostgres(ctx context.Context, binDir string, settings ...string) (*Postgres, error) {
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	base := os.TempDir()
	if cred != nil && !traversable(base) {
		base = "/tmp" // the postgres user must reach its data directory
	}
	dir, err := os.MkdirTemp(base, "provisioner-pg-")
	if err != nil {
		return nil, err
	}
	pw := make([]byte, 16)
	_, _ = rand.Read(pw)
	p := &Postgres{BinDir: binDir, Dir: dir, User: "temporal", Password: hex.EncodeToString(pw), settings: settings}
	fail := func(err error) (*Postgres, error) {
		p.Stop()
		return nil, err
	}
	pwFile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwFile, []byte(p.Password+"\n"), 0o600); err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := chownTree(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", filepath.Join(dir, "data"), "-U", p.User,
		"--pwfile", pwFile, "--auth", "scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w: %s", err, out))
	}
	_ = os.Remove(pwFile)

	if p.Port, err = FreePort(); err != nil {
		return fail(err)
	}
	if p.log, err = os.Create(filepath.Join(dir, "postgres.log")); err != nil {
		return fail(err)
	}
	p.cred = cred
	if err := p.start(ctx); err != nil {
		return fail(err)
	}
	return p, nil
}

// start runs the postmaster on the cluster's port and waits until it accepts connections.
func (p *Postgres) start(ctx context.Context) error {
	// loopback TCP only (no Unix socket); enough connections for every Temporal service's pools
	args := []string{"-D", filepath.Join(p.Dir, "data"),
		"-c", "listen_addresses=127.0.0.1", "-c", "port=" + strconv.Itoa(p.Port), "-c", "unix_socket_directories=",
		"-c", "max_connections=300"}
	for _, kv := range p.settings {
		args = append(args, "-c", kv)
	}
	p.cmd = exec.Command(filepath.Join(p.BinDir, "postgres"), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true, Pdeathsig: syscall.SIGINT}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	done := make(chan error, 1)
	p.done = done
	cmd := p.cmd
	go func() { done <- cmd.Wait() }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		ready := exec.CommandContext(ctx, filepath.Join(p.BinDir, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port))
		if ready.Run() == nil {
			return nil
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("postgres exited (%v): %s", err, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections in 60s: %s", p.tail())
		}
	}
}

// Restart stops the postmaster with a fast shutdown (every connection closed, as a database
// restarted for maintenance), waits down, and starts it again on the same port and data (fault
// tests).
func (p *Postgres) Restart(ctx context.Context, down time.Duration) error {
	stopProcess(p.cmd, p.done, syscall.SIGINT, 20*time.Second)
	time.Sleep(down)
	return p.start(ctx)
}

// Addr is the cluster's host:port.
func (p *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// Transactions is the number of transactions committed and rolled back in the temporal and
// temporal_visibility databases since the cluster started (pg_stat_database, through psql).
func (p *Postgres) Transactions(ctx context.Context) (int64, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(p.BinDir, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", p.User,
		"-d", "postgres", "-Atc", "SELECT coalesce(sum(xact_commit + xact_rollback), 0) FROM pg_stat_database WHERE datname IN ('temporal', 'temporal_visibility')")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+p.Password)
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("psql on %s: %w", p.Addr(), err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
}

func (p *Postgres) tail() string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "postgres.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// Stop shuts the cluster down (fast shutdown, then SIGKILL after 20 s) and removes its directory.
func (p *Postgres) Stop() {
	stopProcess(p.cmd, p.done, syscall.SIGINT, 20*time.Second)
	p.cmd = nil
	if p.log != nil {
		p.log.Close()
	}
	if p.Dir != "" {
		_ = os.RemoveAll(p.Dir)
	}
}

// postgresCredential is nil when not root, else the postgres system user's IDs.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs the postgres system user (made by the Debian package): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// traversable says whether every directory from / to dir lets others through.
func traversable(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// SQLTemporalOptions start a Temporal server (not the dev server) persisting to PostgreSQL.
type SQLTemporalOptions struct {
	Dir           string // config and server log
	ServerBin     string // .bin/temporal-server
	SQLToolBin    string // .bin/temporal-sql-tool
	PostgresBin   string // FindPostgres
	Namespace     string // registered, with the provisioner's search attributes; default "default"
	Retention     time.Duration
	HistoryShards int // default 4
	Output        io.Writer
	// TLS, when set, makes the frontend and the connections between the services require
	// mutual TLS with these certificates (CreateTemporalTLS).
	TLS *TemporalTLS
	// NoSearchAttributes leaves the provisioner's search attributes to `choria-provisioner setup`.
	NoSearchAttributes bool
	// PostgresSettings are given to PostgreSQL as -c KEY=VALUE (tuning: synchronous_commit=off).
	PostgresSettings []string
	// MetricsPort, when set, serves the server's Prometheus /metrics on 127.0.0.1 (benchmarks).
	MetricsPort int
	// StoreConns is each service's connection pool to the temporal database (default 20; the
	// visibility database gets half).
	StoreConns int
	// DynamicConfig are KEY=VALUE dynamic config settings (VALUE in YAML, for every namespace),
	// e.g. history.persistenceMaxQPS=20000.
	DynamicConfig []string
}

// SQLTemporal is a Temporal server on a throwaway PostgreSQL cluster: frontend, history,
// matching and worker services in one process, each on its own loopback port.
type SQLTemporal struct {
	Opts     SQLTemporalOptions
	Postgres *Postgres
	Address  string // frontend host:port
	// Listeners are the services' gRPC addresses and the frontend's HTTP API: frontend,
	// frontend-http, history, matching (the worker service serves no gRPC; membership ports
	// are not included).
	Listeners map[string]string
	cmd       *exec.Cmd
	done      chan error
	log       *os.File
}

// FindTool looks for a binary built into .bin/ (see FindTemporalBinary) by name.
func FindTool(name string) (string, error) {
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), name))
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			candidates = append(candidates, filepath.Join(dir, ".bin", name))
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
	return "", fmt.Errorf("%s was not found (looked beside this binary and in .bin/): run `make tools`", name)
}

// StartSQLTemporal starts PostgreSQL, creates and migrates the temporal and temporal_visibility
// databases with the sql tool, starts the server, registers the namespace and the provisioner's
// search attributes (through the operator service, as on any SQL visibility store) and waits
// until a visibility query on them answers.
func StartSQLTemporal(ctx context.Context, o SQLTemporalOptions) (*SQLTemporal, error) {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.HistoryShards == 0 {
		o.HistoryShards = 4
	}
	if o.Output == nil {
		o.Output = io.Discard
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "config"), 0o700); err != nil {
		return nil, err
	}
	if o.StoreConns == 0 {
		o.StoreConns = 20
	}
	pg, err := StartPostgres(ctx, o.PostgresBin, o.PostgresSettings...)
	if err != nil {
		return nil, err
	}
	s := &SQLTemporal{Opts: o, Postgres: pg}
	fail := func(err error) (*SQLTemporal, error) {
		s.Stop()
		return nil, err
	}
	for _, db := range []struct{ name, schema string }{{"temporal", "postgresql/v12/temporal"}, {"temporal_visibility", "postgresql/v12/visibility"}} {
		for _, args := range [][]string{{"create-database"}, {"setup-schema", "-v", "0.0"}, {"update-schema", "--schema-name", db.schema}} {
			cmd := exec.CommandContext(ctx, o.SQLToolBin, append([]string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(pg.Port),
				"-u", pg.User, "--db", db.name}, args...)...)
			cmd.Env = append(os.Environ(), "SQL_PASSWORD="+pg.Password)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fail(fmt.Errorf("temporal-sql-tool %s on %s: %w: %s", args[0], db.name, err, out))
			}
		}
	}

	cfg, listeners, err := sqlTemporalConfig(pg, o)
	if err != nil {
		return fail(err)
	}
	if err := writeDynamicConfig(filepath.Join(o.Dir, "config", "dynamicconfig.yaml"), o.DynamicConfig); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "config", "temporal.yaml"), []byte(cfg), 0o600); err != nil {
		return fail(err)
	}
	s.Address, s.Listeners = listeners["frontend"], listeners
	if err := s.start(ctx); err != nil {
		return fail(err)
	}
	if err := s.setupNamespace(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *SQLTemporal) start(ctx context.Context) error {
	var err error
	// appended to: a restarted server's log follows the one before it
	if s.log, err = os.OpenFile(filepath.Join(s.Opts.Dir, "temporal-server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return err
	}
	out := io.MultiWriter(s.log, s.Opts.Output)
	s.cmd = exec.Command(s.Opts.ServerBin, "--root", s.Opts.Dir, "--config", "config", "--env", "temporal", "--allow-no-auth", "start")
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting temporal-server: %w", err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Address, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("temporal-server exited (%v): see %s", err, s.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("temporal-server frontend %s did not listen in 90s: see %s", s.Address, s.log.Name())
		}
	}
}

// Restart stops the server as Stop does, waits down, and starts it again on the same ports and
// databases (fault tests: a server restarted for maintenance or a package upgrade).
func (s *SQLTemporal) Restart(ctx context.Context, down time.Duration) error {
	s.stopServer()
	time.Sleep(down)
	return s.start(ctx)
}

func (s *SQLTemporal) stopServer() {
	stopProcess(s.cmd, s.done, syscall.SIGTERM, 15*time.Second)
	if s.log != nil {
		s.log.Close()
	}
}

// Stop stops the server (SIGTERM, SIGKILL after 15 s), then PostgreSQL.
func (s *SQLTemporal) Stop() {
	s.stopServer()
	s.cmd = nil
	if s.Postgres != nil {
		s.Postgres.Stop()
	}
}

// freeSmallPort is a free loopback port below 32768: the SQL stores keep membership ports in a
// smallint column, and the kernel's ephemeral ports (FreePort) start at 32768.
func freeSmallPort() (int, error) {
	for range 200 {
		n, err := rand.Int(rand.Reader, big.NewInt(32767-20000))
		if err != nil {
			return 0, err
		}
		p := 20000 + int(n.Int64())
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free loopback port in 20000-32767")
}

// writeDynamicConfig writes KEY=VALUE settings as the server's dynamic config file (an empty one
// without settings: the server reads it at start).
func writeDynamicConfig(file string, settings []string) error {
	var b strings.Builder
	for _, kv := range settings {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("dynamic config %q: want KEY=VALUE", kv)
		}
		fmt.Fprintf(&b, "%s:\n  - value: %s\n", k, v)
	}
	return os.WriteFile(file, []byte(b.String()), 0o600)
}

// sqlTemporalConfig is the server's static configuration: PostgreSQL for both stores, every
// service bound to 127.0.0.1 on free ports, no pprof listener, archival off, /metrics on
// 127.0.0.1 only when asked for.
func sqlTemporalConfig(pg *Postgres, o SQLTemporalOptions) (string, map[string]string, error) {
	shards, tlsFiles := o.HistoryShards, o.TLS
	ports := make([]int, 9)
	for i := range ports {
		p, err := freeSmallPort()
		if err != nil {
			return "", nil, err
		}
		ports[i] = p
	}
	globalExtra := ""
	if tlsFiles != nil {
		globalExtra = tlsFiles.ServerConfig()
	}
	if o.MetricsPort != 0 {
		// histograms: the bench reads task and persistence latencies' counts and sums
		globalExtra += fmt.Sprintf("  metrics:\n    prometheus:\n      timerType: histogram\n      listenAddress: \"127.0.0.1:%d\"\n", o.MetricsPort)
	}
	frontend := fmt.Sprintf("127.0.0.1:%d", ports[0])
	listeners := map[string]string{"frontend": frontend}
	for name, i := range map[string]int{"frontend-http": 2, "history": 3, "matching": 5} {
		listeners[name] = fmt.Sprintf("127.0.0.1:%d", ports[i])
	}
	store := func(db string, conns int) string {
		return fmt.Sprintf(`      sql:
        pluginName: postgres12
        databaseName: %s
        connectAddr: %q
        connectProtocol: tcp
        user: %s
        password: %q
        maxConns: %d
        maxIdleConns: %d
        maxConnLifetime: 1h
`, db, pg.Addr(), pg.User, pg.Password, conns, conns)
	}
	return fmt.Sprintf(`# written by internal/devstack (StartSQLTemporal): loopback only
log:
  stdout: true
  level: warn
persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: %d
  datastores:
    postgres-default:
%s    postgres-visibility:
%sglobal:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
%sservices:
  frontend:
    rpc: {grpcPort: %d, membershipPort: %d, httpPort: %d, bindOnLocalHost: true}
  history:
    rpc: {grpcPort: %d, membershipPort: %d, bindOnLocalHost: true}
  matching:
    rpc: {grpcPort: %d, membershipPort: %d, bindOnLocalHost: true}
  worker:
    rpc: {grpcPort: %d, membershipPort: %d, bindOnLocalHost: true}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: %q
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: %q
  pollInterval: 60s
`, shards, store("temporal", o.StoreConns), store("temporal_visibility", max(o.StoreConns/2, 1)), globalExtra,
		ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6], ports[7], ports[8], frontend,
		filepath.Join(o.Dir, "config", "dynamicconfig.yaml")), listeners, nil
}

// setupNamespace registers the namespace (a real server has only temporal-system), then the
// provisioner's search attributes through service.Setup, retrying while the services' namespace
// caches catch up, and checks a visibility query on them answers.
func (s *SQLTemporal) setupNamespace(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var c client.Client
	var err error
	retry := func(what string, f func() error) error {
		for {
			if err = f(); err == nil {
				return nil
			}
			select {
			case exit := <-s.done:
				s.done <- exit
				return fmt.Errorf("temporal-server exited (%v) while %s: see %s", exit, what, s.log.Name())
			case <-ctx.Done():
				return fmt.Errorf("%s on %s: %w", what, s.Address, err)
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	cfg := s.ClientConfig()
	cfg.Temporal.Plaintext = true // registers a namespace, carries no payloads
	if err := retry("connecting to temporal-server", func() error {
		c, err = service.DialTemporal(ctx, cfg, zap.NewNop())
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	retention := s.Opts.Retention
	if retention == 0 {
		retention = 72 * time.Hour
	}
	if err := retry("registering namespace "+s.Opts.Namespace, func() error {
		_, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: s.Opts.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(retention)})
		var exists *serviceerror.NamespaceAlreadyExists
		if errors.As(err, &exists) {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	if s.Opts.NoSearchAttributes {
		// `setup` comes next: wait until the frontend knows the namespace
		return retry("listing workflows in the new namespace", func() error {
			_, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.Opts.Namespace})
			return err
		})
	}
	if err := retry("registering search attributes", func() error {
		return service.Setup(ctx, c, s.Opts.Namespace, 0)
	}); err != nil {
		return err
	}
	return s.WaitSearchAttributes(ctx, c)
}

// WaitSearchAttributes waits until a visibility query on the provisioner's search attributes
// answers: registered attributes take a few seconds to reach every service's cache.
func (s *SQLTemporal) WaitSearchAttributes(ctx context.Context, c client.Client) error {
	var conds []string
	for n, t := range workflows.SearchAttributes() {
		if t == enumspb.INDEXED_VALUE_TYPE_DATETIME {
			conds = append(conds, n+" < '2000-01-01T00:00:00Z'")
		} else {
			conds = append(conds, n+" = 'x'")
		}
	}
	for {
		_, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.Opts.Namespace, Query: strings.Join(conds, " AND ")})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("a visibility query on the search attributes on %s: %w", s.Address, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ClientConfig is the temporal section a client of this server needs: its address, namespace
// and, with TLS, the CA, the provisioner's client certificate and the frontend's name.
func (s *SQLTemporal) ClientConfig() *config.Config {
	cfg := &config.Config{Temporal: config.Temporal{Address: s.Address, Namespace: s.Opts.Namespace, TaskQueue: "choria-provisioner"}}
	if s.Opts.TLS != nil {
		cfg.Temporal.TLS = s.Opts.TLS.Client()
	}
	return cfg
}

// PID is the postmaster's process ID (its backends share its process group).
func (p *Postgres) PID() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// PID is the temporal-server process ID.
func (s *SQLTemporal) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// stopProcess signals cmd (started in its own process group) and waits for its exit on done,
// killing the group if it has not stopped within grace. A nil or unstarted cmd is a no-op.
func stopProcess(cmd *exec.Cmd, done <-chan error, sig syscall.Signal, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}
