package devstack

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/choria-temporal/provisioner/internal/codec"
)

// StackOptions describe a local provisioning network.
type StackOptions struct {
	Dir          string // state directory; everything the stack makes lives here
	Self         string // the choria-provisioner binary (fleet servers and the example helper run from it)
	TemporalBin  string
	Servers      int
	Persist      bool // Temporal on a SQLite file in Dir, else in memory
	UI           bool
	UIPort       int
	TemporalPort int
	MonitorPort  int
	// Helper overrides the example helper command line.
	Helper      string
	Interval    string
	DeferDelay  string
	TemporalOut io.Writer
	LogLevel    string
	// TemporalAddress uses a running Temporal instead of starting one (tests share one server).
	TemporalAddress string
	// IdentityPrefix keeps fleets of different tests apart in one Temporal namespace.
	IdentityPrefix string
	// TaskQueue defaults to choria-provisioner.
	TaskQueue string
}

// Stack is a running local network: Temporal, a broker and a fleet, and the files a provisioner
// needs to work against them.
type Stack struct {
	Opts            StackOptions
	Temporal        *testsuite.DevServer // nil when StackOptions.TemporalAddress was given
	TemporalAddress string
	Broker          *Broker
	Creds           *Credentials
	Fleet           *Fleet
	ConfigFile      string // provisioner YAML
	ClientConfig    string // Choria client config
	AdminConfig     string // Choria client config of a fleet administrator (reprovision)
	CodecKeyFile    string
	HelperCommand   string
	TaskQueue       string
	ctx             context.Context
	cancel          context.CancelFunc
	wg              sync.WaitGroup
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
	s := &Stack{Opts: o, TaskQueue: o.TaskQueue, TemporalAddress: o.TemporalAddress}
	s.ctx, s.cancel = context.WithCancel(context.Background())

	brokerPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	credsDir := filepath.Join(o.Dir, "credentials")
	// the provisioning JWT names the broker URL; a reused state directory keeps its port
	if b, err := os.ReadFile(filepath.Join(credsDir, "broker.port")); err == nil {
		fmt.Sscanf(string(b), "%d", &brokerPort)
	}
	s.Creds, err = LoadOrCreateCredentials(credsDir, fmt.Sprintf("nats://127.0.0.1:%d", brokerPort))
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if err := os.WriteFile(filepath.Join(credsDir, "broker.port"), []byte(fmt.Sprint(brokerPort)), 0o600); err != nil {
		return nil, err
	}

	dbFile := ""
	if o.Persist {
		dbFile = filepath.Join(o.Dir, "temporal.db")
	}
	if s.TemporalAddress == "" {
		s.Temporal, err = StartTemporal(ctx, TemporalOptions{Binary: o.TemporalBin, DBFile: dbFile, UI: o.UI, UIPort: o.UIPort, Port: o.TemporalPort, Output: o.TemporalOut, Retention: 30 * 24 * time.Hour})
		if err != nil {
			return nil, err
		}
		s.TemporalAddress = s.Temporal.FrontendHostPort()
	}

	s.Broker, err = StartBroker(s.ctx, &s.wg, o.Dir, brokerPort, s.Creds, "warn", filepath.Join(o.Dir, "broker.log"))
	if err != nil {
		s.Stop()
		return nil, err
	}

	if err := s.writeProvisionerConfig(); err != nil {
		s.Stop()
		return nil, err
	}

	s.Fleet = &Fleet{Self: o.Self, Dir: filepath.Join(o.Dir, "fleet"), JWTFile: s.Creds.ProvisioningJWT, Prefix: o.IdentityPrefix}
	if err := s.Fleet.StartN(o.Servers); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Stack) writeProvisionerConfig() error {
	c := s.Creds
	s.ClientConfig = filepath.Join(s.Opts.Dir, "client.conf")
	client := fmt.Sprintf(`identity = %s
collectives = provisioning
main_collective = provisioning
loglevel = warn
plugin.choria.middleware_hosts = %s
plugin.choria.use_srv = false
plugin.security.provider = choria
plugin.security.choria.token_file = %s
plugin.security.choria.seed_file = %s
plugin.security.choria.ca = %s
plugin.security.issuer.names = choria
plugin.security.issuer.choria.public = %s
`, ProvisionerCallerID, s.Broker.URL, c.ProvisionerJWT, c.ProvisionerSeed, c.BrokerCert, c.IssuerPublic)
	if err := os.WriteFile(s.ClientConfig, []byte(client), 0o600); err != nil {
		return err
	}
	s.AdminConfig = filepath.Join(s.Opts.Dir, "admin.conf")
	admin := fmt.Sprintf(`identity = admin
collectives = choria
main_collective = choria
loglevel = warn
plugin.choria.middleware_hosts = %s
plugin.choria.use_srv = false
plugin.security.provider = choria
plugin.security.choria.token_file = %s
plugin.security.choria.seed_file = %s
plugin.security.choria.ca = %s
plugin.security.issuer.names = choria
plugin.security.issuer.choria.public = %s
`, s.Broker.URL, c.AdminJWT, c.AdminSeed, c.BrokerCert, c.IssuerPublic)
	if err := os.WriteFile(s.AdminConfig, []byte(admin), 0o600); err != nil {
		return err
	}

	s.CodecKeyFile = filepath.Join(s.Opts.Dir, "codec.key")
	if _, err := os.Stat(s.CodecKeyFile); err != nil {
		if err := os.WriteFile(s.CodecKeyFile, []byte(codec.NewKey()+"\n"), 0o600); err != nil {
			return err
		}
	}

	s.HelperCommand = s.Opts.Helper
	if s.HelperCommand == "" {
		// the stand-alone helper binary starts in milliseconds; the subcommand carries go-choria's
		// start-up cost (~0.3 s) on every call
		helper := s.Opts.Self + " example-helper"
		if st, err := os.Stat(filepath.Join(filepath.Dir(s.Opts.Self), "example-helper")); err == nil && !st.IsDir() {
			helper = filepath.Join(filepath.Dir(s.Opts.Self), "example-helper")
		}
		s.HelperCommand = fmt.Sprintf("%s --broker %s --issuer %s", helper, s.Broker.URL, c.IssuerPublic)
	}
	interval := s.Opts.Interval
	if interval == "" {
		interval = "1m"
	}
	deferDelay := s.Opts.DeferDelay
	if deferDelay == "" {
		deferDelay = "10s"
	}
	s.ConfigFile = filepath.Join(s.Opts.Dir, "provisioner.yaml")
	yaml := fmt.Sprintf(`# written by choria-provisioner dev; every key is a Choria Provisioner key except temporal,
# choria_config, defer_delay and monitor_address
interval: %s
site: dev
loglevel: %s
logfile: %s
helper: %q
token: %q
monitor_port: %d
monitor_address: 127.0.0.1
broker_provisioning_password: %q
lifecycle_component: provision_mode_server
features:
  jwt: true
  ed25519: true
jwt_verify_cert: %q
jwt_signing_key: %q
jwt_signing_token: %q
server_jwt_validity: 365d
defer_delay: %s
choria_config: %q
temporal:
  address: %q
  namespace: default
  task_queue: %s
  codec_key_file: %q
`, interval, s.Opts.LogLevel, filepath.Join(s.Opts.Dir, "provisioner.log"), s.HelperCommand, c.Token, s.Opts.MonitorPort, c.ProvisioningPassword,
		c.IssuerPublic, c.ProvisionerSeed, c.ProvisionerJWT, deferDelay, s.ClientConfig, s.TemporalAddress, s.TaskQueue, s.CodecKeyFile)
	return os.WriteFile(s.ConfigFile, []byte(yaml), 0o600)
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
	s.wg.Wait()
	if s.Temporal != nil {
		_ = s.Temporal.Stop()
	}
}

// RewriteConfig writes the provisioner configuration again after Opts changed (tests swap the helper).
func (s *Stack) RewriteConfig() error { return s.writeProvisionerConfig() }
