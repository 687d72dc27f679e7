// Package config loads the provisioner's configuration: the Choria Provisioner's YAML keys, unchanged,
// plus a temporal section. Defaults first, then the YAML file, then PROVISIONER_* environment variables.
package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/kballard/go-shellquote"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix starts every environment override; "__" separates nested keys, so
// PROVISIONER_TEMPORAL__ADDRESS sets temporal.address and PROVISIONER_JWT_SIGNING_KEY sets jwt_signing_key.
const EnvPrefix = "PROVISIONER_"

// CodecKeyEnv may hold the payload codec keys (hex, comma separated, active first) instead of
// temporal.codec_key_file. It is read directly, so a key can never be written inline in YAML.
const CodecKeyEnv = "PROVISIONER_CODEC_KEY"

// HelperBaseEnv are the variables of the provisioner's environment every helper gets (when set):
// what interpreters and the tools they call need to run, and nothing that could be a secret.
// helper_env names more; the helper gets no other variable of the provisioner's.
var HelperBaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ErrInvalid wraps every validation failure so callers can tell bad configuration from I/O errors.
var ErrInvalid = errors.New("invalid configuration")

// Features are the Choria Provisioner's feature switches.
type Features struct {
	JWT      bool `koanf:"jwt"`
	ED25519  bool `koanf:"ed25519"`
	PKI      bool `koanf:"pki"`
	Upgrades bool `koanf:"upgrades"`
}

// Temporal says where the workflows live.
type Temporal struct {
	Address   string `koanf:"address"`
	Namespace string `koanf:"namespace"`
	TaskQueue string `koanf:"task_queue"`
	// CodecKeyFile holds the payload encryption keys, one hex key a line, active first. The key
	// itself may instead come from the PROVISIONER_CODEC_KEY environment variable, never from YAML.
	CodecKeyFile string `koanf:"codec_key_file"`
	// Plaintext turns the payload codec off; for debugging only.
	Plaintext bool `koanf:"plaintext"`
	// LocalActivities is accepted and means FastMode: one switch for speed (a warning says so).
	LocalActivities bool `koanf:"local_activities"`
	// FastMode runs the steps as local activities, configure excepted: two workflow
	// tasks per host, but the Web UI shows markers, not activities, for the local ones, and a
	// worker that dies mid-host repeats the host's reads and helper call since its last completed
	// workflow task (docs/performance.md, fast mode).
	FastMode bool `koanf:"fast_mode"`
	// Worker tuning; 0 keeps the Temporal SDK's default.
	ActivityPollers         int `koanf:"activity_pollers"`
	WorkflowPollers         int `koanf:"workflow_pollers"`
	MaxConcurrentActivities int `koanf:"max_concurrent_activities"`
	// WorkflowCacheSize bounds the runs a worker process keeps in memory between their tasks
	// (the SDK's sticky cache, shared by the process's workers); an evicted run is replayed from
	// its history at its next task.
	WorkflowCacheSize int `koanf:"workflow_cache_size"`
	// GRPCCompression of the requests to Temporal: "none" (default) or "gzip". Payloads are
	// encrypted, so gzip mostly spends CPU on both ends for nothing (docs/performance.md).
	GRPCCompression string `koanf:"grpc_compression"`
	// WorkerVersioning puts the worker in a Temporal Worker Deployment named after the task
	// queue, as the build of its version: a starting replica of a newer build makes it current,
	// and from then on no replica of an older build gets a task (docs/architecture.md,
	// "Upgrading the workflow"). On by default: the first release's replicas must already be
	// versioned for the next upgrade to be safe. Off: an unversioned worker.
	WorkerVersioning bool `koanf:"worker_versioning"`

	// TLS and the API key: how the frontend is reached securely (config/tls.go).
	TLS        TLS    `koanf:"tls"`
	APIKey     Secret `koanf:"api_key"` // only from PROVISIONER_TEMPORAL__API_KEY, never YAML
	APIKeyFile string `koanf:"api_key_file"`
}

// Config is the whole configuration. Keys without a koanf tag of their own below are the Choria
// Provisioner's, spelled as it spells them.
type Config struct {
	Workers                    int      `koanf:"workers"`           // hosts whose helper runs at once in this process; 0: the number of CPUs
	Interval                   string   `koanf:"interval"`          // discovery sweep period, minimum 1m
	Logfile                    string   `koanf:"logfile"`           // empty or "-": stderr
	Loglevel                   string   `koanf:"loglevel"`          // debug, info, warn, error
	Helper                     string   `koanf:"helper"`            // command line, split with shell quoting rules
	HelperTimeout              string   `koanf:"helper_timeout"`    // ours: default 10s like the Choria Provisioner
	HelperRateLimit            float64  `koanf:"helper_rate_limit"` // ours: helper calls per second across all workers, 0 unlimited
	NewHostsRate               float64  `koanf:"new_hosts_rate"`    // ours: sightings per second discovery may hand to Temporal, 0 unlimited
	NewHostsBurst              int      `koanf:"new_hosts_burst"`   // ours: ... at once, beyond the rate
	HelperEnv                  []string `koanf:"helper_env"`        // ours: environment variables the helper gets beside HelperBaseEnv
	HelperUser                 string   `koanf:"helper_user"`       // ours: the user (name or uid) the helper runs as (config/helper.go)
	RPCTimeout                 string   `koanf:"rpc_timeout"`       // ours: how long one RPC waits for its reply
	DeferDelay                 string   `koanf:"defer_delay"`       // ours: how long a deferred host waits before its steps run again
	Token                      string   `koanf:"token"`             // provisioning token; stays in worker config, never in history
	Insecure                   bool     `koanf:"choria_insecure"`   // accepted for compatibility
	Site                       string   `koanf:"site"`              // label on every metric and search attribute; empty as the Choria Provisioner's default
	MonitorPort                int      `koanf:"monitor_port"`      // Prometheus /metrics, 0 disables
	MonitorAddress             string   `koanf:"monitor_address"`   // ours: bind address for monitor_port; empty: all interfaces, as the Choria Provisioner
	MonitorPprof               bool     `koanf:"monitor_pprof"`     // ours: Go profiles under /debug/pprof/ on the monitor port
	HealthPort                 int      `koanf:"health_port"`       // ours: /healthz and /readyz, 0 disables; served whether or not monitor_port is
	HealthAddress              string   `koanf:"health_address"`    // ours: bind address for health_port; default 127.0.0.1, empty: all interfaces
	BrokerProvisioningPassword string   `koanf:"broker_provisioning_password"`
	LifecycleComponent         string   `koanf:"lifecycle_component"`
	CertDenyList               []string `koanf:"cert_deny_list"`
	JWTVerifyCert              string   `koanf:"jwt_verify_cert"`
	JWTSigningKey              string   `koanf:"jwt_signing_key"`
	// ours: a key only the workers hold (never the codec server): the helper's private keys are
	// sealed under it in history, so those who may view history cannot take a host's identity
	SecretsKeyFile     string         `koanf:"secrets_key_file"`
	JWTSigningToken    string         `koanf:"jwt_signing_token"`
	ServerJWTValidity  string         `koanf:"server_jwt_validity"`
	LeaderElection     bool           `koanf:"leader_election"` // accepted; replicas need no election here
	UpgradesRepository string         `koanf:"upgrades_repository"`
	UpgradesOptional   bool           `koanf:"upgrades_optional"`
	RegoPolicy         string         `koanf:"rego_policy"` // accepted, not used
	BrokerPort         int            `koanf:"broker_port"` // accepted, not used
	Management         map[string]any `koanf:"management"`  // backplane settings; accepted, not used
	Features           Features       `koanf:"features"`
	Temporal           Temporal       `koanf:"temporal"`
	ChoriaConfig       string         `koanf:"choria_config"` // Choria client config file
	Renewal            Renewal        `koanf:"renewal"`       // ours: renewing identities before they lapse (config/renewal.go)
	Audit              Audit          `koanf:"audit"`         // ours: the audit sink outside the namespace (config/audit.go)

	// Parsed forms, filled by Load.
	IntervalDuration          time.Duration     `koanf:"-"`
	HelperTimeoutDuration     time.Duration     `koanf:"-"`
	RPCTimeoutDuration        time.Duration     `koanf:"-"`
	DeferDelayDuration        time.Duration     `koanf:"-"`
	ServerJWTValidityDuration time.Duration     `koanf:"-"`
	HelperCommand             []string          `koanf:"-"`
	HelperCredential          *HelperCredential `koanf:"-"` // helper_user resolved; nil: the provisioner's own user
	File                      string            `koanf:"-"`

	// Warnings are what Load accepted as the Choria Provisioner did but an operator should know.
	Warnings []string `koanf:"-"`
}

// DefaultCertDenyList is the Choria Provisioner's default list of names a CSR may not carry.
var DefaultCertDenyList = []string{`\.privileged.mcollective$`, `\.privileged.choria$`, `\.mcollective$`, `\.choria$`}

func defaults() map[string]any {
	d := map[string]any{
		"interval":            "1m",
		"loglevel":            "info",
		"health_port":         9465,
		"health_address":      "127.0.0.1", // this host's probes; every interface must be asked for
		"helper_timeout":      "10s",
		"rpc_timeout":         "10s",
		"defer_delay":         "30s",
		"lifecycle_component": "provision_mode_server",
		"server_jwt_validity": "365d",
		"temporal.address":    "127.0.0.1:7233",
		"temporal.namespace":  "default",
		"temporal.task_queue": "choria-provisioner",
		// the Go SDK's 2 pollers each kept a busy worker waiting on tasks: 8 took 500 simulated
		// hosts from 6.0 to 8.8 hosts/s, 16 did no better (docs/performance.md)
		"temporal.workflow_pollers": 8,
		"temporal.activity_pollers": 8,
		// concurrent steps bound memory: on x509 (protocol v1) sites every RPC in flight holds
		// go-choria's 1.6 MB reply buffer (~320 MB at 200), on v2 sites a few kB (the
		// activities build their requests themselves); 200 is ~10x what 20 hosts/s keeps busy
		"temporal.max_concurrent_activities": 200,
		// a run in the cache holds ~80 kB (its coroutines' stacks, its state); the SDK's 10,000
		// let a 10,000-host burst hold 480 MiB (85-126 MiB at 500). An evicted run's next task replays its ~40 history
		// events: at 3,000 hosts at once, 400 cost no measurable rate (docs/performance.md)
		"temporal.workflow_cache_size": 500,
		// a flood of forged startup events or discovery replies starts at most this many runs a
		// second; at the 15-35 hosts/s measured (docs/performance.md) neither bounds a real fleet,
		// and the hosts of a burst beyond new_hosts_burst are found by a sweep brought forward
		"new_hosts_rate":  50,
		"new_hosts_burst": 500,
		// replicas upgraded one at a time: the newest build takes every run's next workflow task
		// and an older one none (docs/architecture.md, "Upgrading the workflow")
		"temporal.worker_versioning": true,
	}
	for k, v := range auditDefaults() {
		d[k] = v
	}
	for k, v := range renewalDefaults() {
		d[k] = v
	}
	return d
}

// Load reads file (may be empty for defaults and environment only) and validates the result.
func Load(path string) (*Config, error) {
	return readValid(path, (*Config).validate)
}

// LoadForOperator reads the same file for the operator CLI, which talks only to Temporal (and,
// for reprovision, Choria): only the temporal section and the codec key must be valid.
func LoadForOperator(path string) (*Config, error) {
	return readValid(path, (*Config).validateTemporal)
}

func readValid(path string, validate func(*Config) error) (*Config, error) {
	cfg, err := read(path, true)
	if err != nil {
		return nil, err
	}
	if err := validate(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Parse reads file and the environment like Load but validates nothing and leaves the parsed
// forms (durations, HelperCommand) empty: for the preflight check, which reports every problem
// rather than the first.
// Unknown keys are not refused here either (Load refuses them).
func Parse(path string) (*Config, error) {
	return read(path, false)
}

// read loads the defaults, the file and the environment; strict refuses a key of the file or a
// PROVISIONER_ variable that names no key of Config (a typo would otherwise be ignored).
func read(path string, strict bool) (*Config, error) {
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(defaults(), "."), nil); err != nil {
		return nil, err
	}
	var fileKeys []string
	if path != "" {
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		for key, instead := range fileOnlyKeys {
			if fk.Exists(key) {
				return nil, invalid(key, "must not be written in %s (a secret in a file and its history): %s", path, instead)
			}
		}
		fileKeys = fk.Keys()
		if err := k.Merge(fk); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	if strict {
		if err := unknownKeys(fileKeys); err != nil {
			return nil, err
		}
	}
	if err := k.Load(env.Provider(EnvPrefix, ".", envKey), nil); err != nil {
		return nil, fmt.Errorf("reading environment: %w", err)
	}

	cfg := &Config{File: path}
	if err := k.UnmarshalWithConf("", cfg, koanf.UnmarshalConf{Tag: "koanf", FlatPaths: false}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return cfg, nil
}

func invalid(key string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
}

// validateRates checks the rates that bound what the fleet can make the provisioner do.
func (c *Config) validateRates() error {
	if c.HelperRateLimit < 0 {
		return invalid("helper_rate_limit", "%v is negative; 0 means unlimited", c.HelperRateLimit)
	}
	if c.NewHostsRate < 0 {
		return invalid("new_hosts_rate", "%v is negative; 0 means unlimited", c.NewHostsRate)
	}
	if c.NewHostsRate > 0 && c.NewHostsBurst < 1 {
		return invalid("new_hosts_burst", "%d: at least 1 with new_hosts_rate %v", c.NewHostsBurst, c.NewHostsRate)
	}
	return nil
}

func (c *Config) validate() error {
	for _, check := range []func() error{c.validateDurations, c.validateNames, c.validateLimits, c.validateFeatures, c.validateHelper, c.validateRenewal, c.validateAudit} {
		if err := check(); err != nil {
			return err
		}
	}
	return c.validateTemporal()
}

// validateDurations parses the durations, with the Choria Provisioner's defaults.
func (c *Config) validateDurations() error {
	var err error
	if c.IntervalDuration, err = ParseDuration(c.Interval); err != nil {
		return invalid("interval", "%v", err)
	}
	if c.IntervalDuration < time.Minute {
		return invalid("interval", "%s is too small, the minimum is 1m", c.Interval)
	}
	if c.HelperTimeoutDuration, err = ParseDuration(c.HelperTimeout); err != nil || c.HelperTimeoutDuration <= 0 {
		return invalid("helper_timeout", "%q is not a positive duration", c.HelperTimeout)
	}
	if c.RPCTimeoutDuration, err = ParseDuration(c.RPCTimeout); err != nil || c.RPCTimeoutDuration <= 0 {
		return invalid("rpc_timeout", "%q is not a positive duration", c.RPCTimeout)
	}
	if c.DeferDelayDuration, err = ParseDuration(c.DeferDelay); err != nil || c.DeferDelayDuration <= 0 {
		return invalid("defer_delay", "%q is not a positive duration", c.DeferDelay)
	}
	if strings.TrimSpace(c.ServerJWTValidity) == "" {
		c.ServerJWTValidity = "365d" // as the Choria Provisioner: empty means a year
	}
	if c.ServerJWTValidityDuration, err = ParseDuration(c.ServerJWTValidity); err != nil || c.ServerJWTValidityDuration <= 0 {
		return invalid("server_jwt_validity", "%q is not a positive duration", c.ServerJWTValidity)
	}
	return nil
}

// validateNames checks the log level and the lifecycle component.
func (c *Config) validateNames() error {
	// logrus's names, any case, as go-choria's logger took them; garbage is refused (the Choria
	// Provisioner quietly logged at warn)
	switch lvl := strings.ToLower(strings.TrimSpace(c.Loglevel)); lvl {
	case "debug", "info", "warn", "error", "fatal":
		c.Loglevel = lvl
	case "trace":
		c.Loglevel = "debug"
	case "warning":
		c.Loglevel = "warn"
	case "panic":
		c.Loglevel = "fatal"
	default:
		return invalid("loglevel", "%q is not one of debug, info, warn, error, fatal", c.Loglevel)
	}

	// as the Choria Provisioner: empty means the default, and only what a NATS subject token
	// cannot hold is refused
	if c.LifecycleComponent == "" {
		c.LifecycleComponent = "provision_mode_server"
	}
	if strings.ContainsAny(c.LifecycleComponent, ".>* \t\r\n") {
		return invalid("lifecycle_component", "%q must not contain '.', '>', '*' or spaces", c.LifecycleComponent)
	}
	return nil
}

// validateLimits checks the counts, rates and ports.
func (c *Config) validateLimits() error {
	// as the Choria Provisioner: how many hosts one process works on at once, the number of CPUs
	// unless set; here it bounds the helper runs, the step that runs the site's own code
	if c.Workers < 0 {
		return invalid("workers", "%d is negative; 0 means the number of CPUs", c.Workers)
	}
	if c.Workers == 0 {
		c.Workers = runtime.NumCPU()
	}
	if err := c.validateRates(); err != nil {
		return err
	}
	for key, v := range map[string]int{"temporal.activity_pollers": c.Temporal.ActivityPollers,
		"temporal.workflow_pollers": c.Temporal.WorkflowPollers, "temporal.max_concurrent_activities": c.Temporal.MaxConcurrentActivities,
		"temporal.workflow_cache_size": c.Temporal.WorkflowCacheSize} {
		if v < 0 {
			return invalid(key, "%d is negative; 0 keeps the default", v)
		}
	}
	if c.MonitorPort < 0 || c.MonitorPort > 65535 {
		return invalid("monitor_port", "%d is not a port number", c.MonitorPort)
	}
	if c.HealthPort < 0 || c.HealthPort > 65535 {
		return invalid("health_port", "%d is not a port number", c.HealthPort)
	}
	everywhere := func(addr string) bool { return addr == "" || addr == "0.0.0.0" || addr == "::" }
	overlap := c.HealthAddress == c.MonitorAddress || everywhere(c.HealthAddress) || everywhere(c.MonitorAddress)
	if c.HealthPort != 0 && c.HealthPort == c.MonitorPort && overlap {
		return invalid("health_port", "%d is monitor_port's too: health has a listener of its own", c.HealthPort)
	}
	return nil
}

// validateFeatures checks what each feature needs: keys to sign and verify with.
func (c *Config) validateFeatures() error {
	if c.Features.PKI && c.Features.ED25519 {
		return invalid("features", "pki and ed25519 are mutually exclusive")
	}
	if c.Features.ED25519 {
		c.Features.JWT = true // as the Choria Provisioner: ed25519 implies jwt
		if c.JWTSigningKey == "" {
			return invalid("jwt_signing_key", "required when features.ed25519 is on")
		}
		if err := secretFile(c.JWTSigningKey); err != nil {
			return invalid("jwt_signing_key", "%v", err)
		}
		if c.JWTSigningToken != "" {
			if err := readable(c.JWTSigningToken); err != nil {
				return invalid("jwt_signing_token", "%v", err)
			}
		}
	}
	if c.Features.JWT {
		if c.JWTVerifyCert == "" {
			return invalid("jwt_verify_cert", "required when features.jwt is on")
		}
		if _, statErr := os.Stat(c.JWTVerifyCert); statErr != nil {
			if b, hexErr := hex.DecodeString(c.JWTVerifyCert); hexErr != nil || len(b) != 32 {
				return invalid("jwt_verify_cert", "%q is neither a readable file nor a hex ed25519 public key", c.JWTVerifyCert)
			}
		}
	}
	if c.Features.Upgrades && c.UpgradesRepository == "" {
		// as the Choria Provisioner: not refused; a host the helper asks to upgrade fails at
		// that step, or goes on with its version under upgrades_optional
		then := "fail at the upgrade step"
		if c.UpgradesOptional {
			then = "are provisioned with the version they run (upgrades_optional)"
		}
		c.Warnings = append(c.Warnings, "features.upgrades is on without upgrades_repository: hosts the helper asks to upgrade "+then)
	}
	return nil
}

// validateHelper checks the helper command and the certificate deny list.
func (c *Config) validateHelper() error {
	var err error
	if len(c.CertDenyList) == 0 {
		c.CertDenyList = DefaultCertDenyList
	}
	for _, re := range c.CertDenyList {
		if _, err := regexp.Compile(TrimRegex(re)); err != nil {
			return invalid("cert_deny_list", "%q: %v", re, err)
		}
	}

	if c.Helper == "" {
		return invalid("helper", "required: the command that returns each server's configuration")
	}
	if c.HelperCommand, err = SplitHelper(c.Helper); err != nil {
		return invalid("helper", "%v", err)
	}
	if err := c.validateHelperEnv(); err != nil {
		return err
	}
	if err := c.validateHelperUser(); err != nil {
		return err
	}

	return c.validateTemporal()
}

func (c *Config) validateTemporal() error {
	if c.Temporal.LocalActivities && !c.Temporal.FastMode {
		c.Temporal.FastMode = true
		c.Warnings = append(c.Warnings, "temporal.local_activities is folded into temporal.fast_mode: fast mode is on")
	}
	if c.SecretsKeyFile != "" {
		if err := secretFile(c.SecretsKeyFile); err != nil {
			return invalid("secrets_key_file", "%v", err)
		}
	}
	if !c.Temporal.Plaintext && c.Temporal.CodecKeyFile == "" && os.Getenv(CodecKeyEnv) == "" {
		return invalid("temporal.codec_key_file", "required (or %s, or temporal.plaintext: true): payloads carry secrets", CodecKeyEnv)
	}
	if c.Temporal.CodecKeyFile != "" {
		if err := secretFile(c.Temporal.CodecKeyFile); err != nil {
			return invalid("temporal.codec_key_file", "%v", err)
		}
	}
	if c.Temporal.Address == "" {
		return invalid("temporal.address", "must not be empty")
	}
	if c.Temporal.Namespace == "" {
		return invalid("temporal.namespace", "must not be empty")
	}
	if c.Temporal.TaskQueue == "" {
		return invalid("temporal.task_queue", "must not be empty")
	}
	switch c.Temporal.GRPCCompression {
	case "", "none", "gzip":
	default:
		return invalid("temporal.grpc_compression", "%q: none or gzip", c.Temporal.GRPCCompression)
	}
	return c.validateTemporalAuth()
}

// TrimRegex accepts the /re/ form of cert_deny_list entries.
func TrimRegex(re string) string {
	if len(re) > 2 && strings.HasPrefix(re, "/") && strings.HasSuffix(re, "/") {
		return re[1 : len(re)-1]
	}
	return re
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// secretFile is readable by the service and by no one else (CheckKeyFile).
func secretFile(path string) error {
	if err := readable(path); err != nil {
		return err
	}
	return CheckKeyFile(path)
}

// SplitHelper splits a helper command line as the Choria Provisioner does, with shell quoting
// rules (the same splitter), and checks that its first word is what exec will run: a file
// found on PATH, or the path given when the word has a slash. The other words are arguments, so
// "ruby /etc/choria-provisioner/helper.rb --site 'dc 1'" runs ruby with two arguments.
func SplitHelper(line string) ([]string, error) {
	words, err := shellquote.Split(line)
	if err != nil {
		return nil, fmt.Errorf("cannot split %q into a command line: %v", line, err)
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("%q has no command", line)
	}
	path, err := exec.LookPath(words[0])
	switch {
	case errors.Is(err, exec.ErrDot):
		// exec refuses a command found in the current directory through PATH; say how to name it
		return nil, fmt.Errorf("%q is found only in the current directory through PATH: write it as ./%s", words[0], words[0])
	case err != nil && !strings.Contains(words[0], "/"):
		return nil, fmt.Errorf("%q is not an executable found on PATH (%s)", words[0], os.Getenv("PATH"))
	case err != nil:
		if _, statErr := os.Stat(words[0]); statErr != nil {
			return nil, fmt.Errorf("%q: %w", words[0], statErr)
		}
		return nil, fmt.Errorf("%q is not an executable file", words[0])
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%q is not an executable file", words[0])
	}
	return words, nil
}

// ParseDuration is time.ParseDuration plus the units go-choria's own parser (what the Choria
// Provisioner read interval and server_jwt_validity with) accepts: d or D (day), w or W (week),
// M (30 days), y or Y (365 days), e.g. "365d", "6M" or "1y".
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	day := 24 * time.Hour
	units := map[byte]time.Duration{'d': day, 'D': day, 'w': 7 * day, 'W': 7 * day, 'M': 30 * day, 'y': 365 * day, 'Y': 365 * day}
	if mult, ok := units[s[len(s)-1]]; ok {
		n, err := strconv.ParseFloat(s[:len(s)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return time.Duration(n * float64(mult)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	return d, nil
}
