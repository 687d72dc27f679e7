package devstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/dev/faultproxy"
)

// StackOptions describe a local provisioning network.
type StackOptions struct {
	Dir         string // state directory; everything the stack makes lives here
	Self        string // the choria-provisioner binary (fleet servers and the example helper run from it)
	TemporalBin string
	Servers     int
	Persist     bool // Temporal on a SQLite file in Dir, else in memory
	// TemporalDBFile puts that file elsewhere (the full-disk fault test: on a small tmpfs).
	TemporalDBFile string
	UI             bool
	UIPort         int
	TemporalPort   int
	MonitorPort    int
	// HealthPort is the provisioner's health_port, on 127.0.0.1; 0: off (the processes of tests
	// and of a dev stack share one machine, and 9465 once).
	HealthPort int
	// Helper overrides the example helper command line.
	Helper      string
	Interval    string
	DeferDelay  string
	TemporalOut io.Writer
	LogLevel    string
	// TemporalAddress uses a running Temporal instead of starting one (tests share one server).
	TemporalAddress string
	// TemporalNamespace defaults to "default".
	TemporalNamespace string
	// TemporalTLS and TemporalAPIKeyFile reach a TemporalAddress that wants TLS or an API key.
	TemporalTLS        config.TLS
	TemporalAPIKeyFile string
	// IdentityPrefix keeps fleets of different tests apart in one Temporal namespace.
	IdentityPrefix string
	// TaskQueue defaults to choria-provisioner.
	TaskQueue string
	// UICodecEndpoint points the Web UI at a codec server.
	UICodecEndpoint string
	// TemporalDynamicConfig are extra KEY=JSON dynamic config values for the dev server.
	TemporalDynamicConfig []string
	// TemporalSQLitePragmas are extra KEY=VALUE pragmas for the dev server's database file.
	TemporalSQLitePragmas []string
	// TemporalEnv is extra KEY=VALUE environment of the dev server process.
	TemporalEnv []string
	// TemporalMetricsPort is the dev server's own /metrics port (0: a random one).
	TemporalMetricsPort int
	// Mode is the network's security: ModeIssuer (default) or ModePKI.
	Mode string
	// Failing makes the example helper refuse the first Failing servers of the fleet until
	// Stack.FixFile exists (the failed-hosts demo; ignored with a Helper of one's own).
	Failing int
	// FaultProxies puts a fault proxy between the provisioner and the broker and another between
	// the provisioner and Temporal (Stack.BrokerProxy, Stack.TemporalProxy): the provisioner's
	// configuration names them, while the fleet and the stack's own clients connect directly.
	FaultProxies bool
	// Streams turns Choria Streams on in the broker and lets the provisioner's credentials use
	// the audit stream (BrokerOptions.Streams, Credentials.grantAuditStream).
	Streams bool
}

// Stack is a running local network: Temporal, a broker and a fleet, and the files a provisioner
// needs to work against them.
type Stack struct {
	Opts            StackOptions
	Temporal        *DevServer // nil when StackOptions.TemporalAddress was given
	TemporalAddress string
	Broker          *Broker
	BrokerProxy     *faultproxy.Proxy // with FaultProxies: the provisioner's way to the broker
	TemporalProxy   *faultproxy.Proxy // with FaultProxies: the provisioner's way to Temporal
	Creds           *Credentials
	Fleet           *Fleet
	ConfigFile      string // provisioner YAML
	ClientConfig    string // Choria client config
	AdminConfig     string // Choria client config of a fleet administrator (reprovision)
	CodecKeyFile    string
	HelperCommand   string
	TaskQueue       string
	Refused         []string // identities the example helper refuses until FixFile exists (Failing)
	FixFile         string
	ctx             context.Context
	cancel          context.CancelFunc
	wg              sync.WaitGroup
	brokerCancel    context.CancelFunc
	brokerWG        sync.WaitGroup
	temporalOpts    TemporalOptions
	exits           chan ChildExit
}

// StartStack brings up Temporal and the broker, writes the provisioner's configuration, and
// starts the fleet (Servers > 0).
func StartStack(ctx context.Context, o StackOptions) (*Stack, error) {
	if o.Dir == "" || o.Self == "" {
		return nil, fmt.Errorf("state directory and binary path are required")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.TaskQueue == "" {
		o.TaskQueue = "choria-provisioner"
	}
	if o.UI && o.UIPort == 0 {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		o.UIPort = p
	}
	s := &Stack{Opts: o, TaskQueue: o.TaskQueue, TemporalAddress: o.TemporalAddress, exits: make(chan ChildExit, 64)}
	s.ctx, s.cancel = context.WithCancel(context.Background())

	brokerPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	credsDir := filepath.Join(o.Dir, "credentials")
	// the provisioning JWT names the broker URL; a reused state directory keeps its port
	movable := true
	if b, err := os.ReadFile(filepath.Join(credsDir, "broker.port")); err == nil {
		fmt.Sscanf(string(b), "%d", &brokerPort)
		movable = false
	}
	if o.Mode == ModePKI {
		s.Creds, err = CreatePKICredentials(credsDir, fmt.Sprintf("nats://127.0.0.1:%d", brokerPort))
	} else {
		s.Creds, err = LoadOrCreateCredentials(credsDir, fmt.Sprintf("nats://127.0.0.1:%d", brokerPort))
	}
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if err := os.WriteFile(filepath.Join(credsDir, "broker.port"), []byte(fmt.Sprint(brokerPort)), 0o600); err != nil {
		return nil, err
	}
	if o.Streams {
		if err := s.Creds.grantAuditStream(); err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
	}

	dbFile := ""
	if o.Persist {
		dbFile = filepath.Join(o.Dir, "temporal.db")
		if o.TemporalDBFile != "" {
			dbFile = o.TemporalDBFile
		}
	}
	if s.TemporalAddress == "" {
		// a zero port is chosen by StartTemporal (another one if the first is taken meanwhile)
		s.temporalOpts = TemporalOptions{Binary: o.TemporalBin, DBFile: dbFile, UI: o.UI, UIPort: o.UIPort, Port: o.TemporalPort, Output: o.TemporalOut, Retention: 30 * 24 * time.Hour, UICodecEndpoint: o.UICodecEndpoint, DynamicConfig: o.TemporalDynamicConfig, SQLitePragmas: o.TemporalSQLitePragmas, Env: o.TemporalEnv, MetricsPort: o.TemporalMetricsPort}
		s.Temporal, err = StartTemporal(ctx, s.temporalOpts)
		if err != nil {
			return nil, err
		}
		go s.watchTemporal(s.Temporal)
		s.TemporalAddress = s.Temporal.FrontendHostPort()
		// RestartTemporal comes back on the same port
		_, port, _ := net.SplitHostPort(s.TemporalAddress)
		s.temporalOpts.Port, _ = strconv.Atoi(port)
		s.Opts.TemporalPort = s.temporalOpts.Port
	}

	if err := s.startBroker(brokerPort, movable); err != nil {
		s.Stop()
		return nil, err
	}

	if o.FaultProxies {
		if err := s.startProxies(); err != nil {
			s.Stop()
			return nil, err
		}
	}

	s.Fleet = &Fleet{Self: o.Self, Dir: filepath.Join(o.Dir, "fleet"), JWTFile: s.Creds.ProvisioningJWT, Prefix: o.IdentityPrefix, OnExit: s.report}
	if o.Failing > 0 {
		for i := range o.Failing {
			s.Refused = append(s.Refused, s.Fleet.Identity(i))
		}
		s.FixFile = filepath.Join(o.Dir, "ca-approved")
	}

	if err := s.writeProvisionerConfig(); err != nil {
		s.Stop()
		return nil, err
	}

	if err := s.Fleet.StartN(o.Servers); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// startProxies starts the fault proxies to the broker and Temporal; they outlive restarts of
// either, which come back on the same ports.
func (s *Stack) startProxies() error {
	var err error
	if s.BrokerProxy, err = faultproxy.Start("broker", fmt.Sprintf("127.0.0.1:%d", s.Broker.Port)); err != nil {
		return err
	}
	s.TemporalProxy, err = faultproxy.Start("temporal", s.TemporalAddress)
	return err
}

// provisionerBroker and provisionerTemporal are the addresses the provisioner is configured with.
func (s *Stack) provisionerBroker() string {
	if s.BrokerProxy != nil {
		return "nats://" + s.BrokerProxy.Addr
	}
	return s.Broker.URL
}

func (s *Stack) provisionerTemporal() string {
	if s.TemporalProxy != nil {
		return s.TemporalProxy.Addr
	}
	return s.TemporalAddress
}

func (s *Stack) writeProvisionerConfig() error {
	helper := s.Opts.Helper
	if helper == "" {
		helper = ExampleHelperCommand(s.Opts.Self, s.provisionerBroker(), s.Creds)
		if len(s.Refused) > 0 {
			helper += fmt.Sprintf(" --refuse %s --fix-file %s", strings.Join(s.Refused, ","), s.FixFile)
		}
	}
	files, err := WriteSiteFiles(s.Creds, SiteOptions{
		Dir: s.Opts.Dir, BrokerURL: s.provisionerBroker(), TemporalAddress: s.provisionerTemporal(), TaskQueue: s.TaskQueue,
		Helper: helper, Interval: s.Opts.Interval, DeferDelay: s.Opts.DeferDelay, LogLevel: s.Opts.LogLevel,
		LogFile: filepath.Join(s.Opts.Dir, "provisioner.log"), MonitorPort: s.Opts.MonitorPort, MonitorAddress: "127.0.0.1",
		HealthPort: stackHealthPort(s.Opts.HealthPort), HealthAddress: "127.0.0.1",
		TemporalNamespace: s.Opts.TemporalNamespace, TemporalTLS: s.Opts.TemporalTLS, TemporalAPIKeyFile: s.Opts.TemporalAPIKeyFile,
	})
	if err != nil {
		return err
	}
	s.ConfigFile, s.ClientConfig, s.AdminConfig, s.CodecKeyFile, s.HelperCommand = files.ConfigFile, files.ClientConfig, files.AdminConfig, files.CodecKeyFile, helper
	return nil
}

// RestartBroker stops the broker, waits down, and starts it again on the same port (fault tests).
func (s *Stack) RestartBroker(down time.Duration) error {
	port := s.Broker.Port
	s.brokerCancel()
	s.brokerWG.Wait()
	time.Sleep(down)
	return s.startBroker(port, false)
}

// EnableStreams turns Choria Streams on in a stack started without (StackOptions.Streams),
// restarting its broker on the same port, before any server or provisioner connects: tests
// whose setup takes the stack as newEnv starts it.
func (s *Stack) EnableStreams() error {
	if s.Opts.Streams {
		return nil
	}
	s.Opts.Streams = true
	if err := s.Creds.grantAuditStream(); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	return s.RestartBroker(0)
}

// RestartTemporal stops the stack's own Temporal dev server and starts it again on the same port
// and database file (fault tests; needs Persist for the state to survive).
func (s *Stack) RestartTemporal(ctx context.Context, down time.Duration) error {
	if s.Temporal == nil {
		return fmt.Errorf("this stack uses a Temporal it did not start")
	}
	if err := s.Temporal.Stop(); err != nil {
		return err
	}
	time.Sleep(down)
	srv, err := StartTemporal(ctx, s.temporalOpts)
	if err != nil {
		return err
	}
	s.Temporal = srv
	go s.watchTemporal(srv)
	return nil
}

// UIURL is the Web UI address when the UI is on.
func (s *Stack) UIURL() string {
	if !s.Opts.UI {
		return ""
	}
	host, _, _ := strings.Cut(s.TemporalAddress, ":")
	return fmt.Sprintf("http://%s:%d", host, s.Opts.UIPort)
}

// Stop stops the fleet, the broker and Temporal.
func (s *Stack) Stop() {
	if s.Fleet != nil {
		s.Fleet.Stop(5 * time.Second)
	}
	s.cancel()
	for _, p := range []*faultproxy.Proxy{s.BrokerProxy, s.TemporalProxy} {
		if p != nil {
			p.Stop()
		}
	}
	s.wg.Wait()
	s.brokerWG.Wait()
	if s.Temporal != nil {
		_ = s.Temporal.Stop()
	}
}

// RewriteConfig writes the provisioner configuration again after Opts changed (tests swap the helper).
func (s *Stack) RewriteConfig() error { return s.writeProvisionerConfig() }

// stackHealthPort is StackOptions.HealthPort as SiteOptions takes it: 0 is off.
func stackHealthPort(port int) int {
	if port == 0 {
		return -1
	}
	return port
}
