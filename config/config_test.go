package config

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writeConfig writes a YAML config with an executable helper and a codec key file beside it.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	helper := filepath.Join(dir, "helper.sh")
	require.NoError(t, os.WriteFile(helper, []byte("#!/bin/sh\necho '{}'\n"), 0o755))
	key := filepath.Join(dir, "codec.key")
	require.NoError(t, os.WriteFile(key, []byte("00\n"), 0o600))
	seed := filepath.Join(dir, "signer.seed")
	require.NoError(t, os.WriteFile(seed, []byte("00"), 0o600))
	file := filepath.Join(dir, "provisioner.yaml")
	content := "temporal:\n  codec_key_file: " + key + "\n" + body
	if !strings.Contains(body, "helper:") {
		content = "helper: " + helper + "\n" + content
	}
	if strings.Contains(body, "temporal:") {
		content = body + "\nhelper: " + helper + "\n"
	}
	content = strings.ReplaceAll(content, "SEED", seed)
	require.NoError(t, os.WriteFile(file, []byte(content), 0o600))
	return file
}

func TestDefaults(t *testing.T) {
	cfg, err := Load(writeConfig(t, ""))
	require.NoError(t, err)
	require.Equal(t, time.Minute, cfg.IntervalDuration)
	require.Equal(t, 10*time.Second, cfg.HelperTimeoutDuration)
	require.Equal(t, 365*24*time.Hour, cfg.ServerJWTValidityDuration)
	require.Equal(t, "provision_mode_server", cfg.LifecycleComponent)
	require.Equal(t, DefaultCertDenyList, cfg.CertDenyList)
	require.Equal(t, "127.0.0.1:7233", cfg.Temporal.Address)
	require.Equal(t, "choria-provisioner", cfg.Temporal.TaskQueue)
	require.Len(t, cfg.HelperCommand, 1)
	require.Empty(t, cfg.MonitorAddress, "all interfaces, as the Choria Provisioner's :monitor_port")
	require.Equal(t, 9465, cfg.HealthPort, "health is served by default, Prometheus or not")
	require.Equal(t, "127.0.0.1", cfg.HealthAddress, "this host's probes only unless every interface is asked for")
	require.Equal(t, runtime.NumCPU(), cfg.Workers, "as the Choria Provisioner: the number of CPUs")
	require.Equal(t, 500, cfg.Temporal.WorkflowCacheSize, "bounds the worker's memory at scale")
	require.Equal(t, 50.0, cfg.NewHostsRate, "a flood of forged sightings is bounded by default")
	require.Equal(t, 500, cfg.NewHostsBurst)
	require.True(t, cfg.Temporal.WorkerVersioning, "on from the first release: docs/architecture.md")
	t.Setenv("PROVISIONER_TEMPORAL__WORKER_VERSIONING", "false")
	cfg, err = Load(writeConfig(t, ""))
	require.NoError(t, err)
	require.False(t, cfg.Temporal.WorkerVersioning)
}

// A file written for the Choria Provisioner, every documented key, loads unchanged.
func TestChoriaProvisionerFileLoads(t *testing.T) {
	file := writeConfig(t, `
workers: 4
interval: 5m
logfile: /dev/null
loglevel: warn
token: s3cret
choria_insecure: false
site: dc1
monitor_port: 9464
broker_provisioning_password: pass
lifecycle_component: provision_mode_server
cert_deny_list:
  - /\.example\.net$/
jwt_verify_cert: 4c1fbb7e3a79db3f8e7ce0e0a9d8be6bd86b3d0b2fa0a43ccaa3c1c8a96f1fe2
jwt_signing_key: SEED
server_jwt_validity: 2y
leader_election: true
upgrades_repository: https://repo.example.net/choria
upgrades_optional: true
rego_policy: /etc/policy.rego
broker_port: 9222
management:
  name: provisioner
features:
  jwt: true
  ed25519: true
  pki: false
  upgrades: true
`)
	cfg, err := Load(file)
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, cfg.IntervalDuration)
	require.Equal(t, 2*365*24*time.Hour, cfg.ServerJWTValidityDuration)
	require.True(t, cfg.Features.ED25519)
	require.True(t, cfg.LeaderElection)
	require.Equal(t, 4, cfg.Workers)
	require.Equal(t, []string{`/\.example\.net$/`}, cfg.CertDenyList)
}

func TestEnvironmentOverrides(t *testing.T) {
	t.Setenv("PROVISIONER_SITE", "from-env")
	t.Setenv("PROVISIONER_TEMPORAL__ADDRESS", "temporal.example:7233")
	t.Setenv("PROVISIONER_INTERVAL", "2m")
	cfg, err := Load(writeConfig(t, "site: from-file\n"))
	require.NoError(t, err)
	require.Equal(t, "from-env", cfg.Site)
	require.Equal(t, "temporal.example:7233", cfg.Temporal.Address)
	require.Equal(t, 2*time.Minute, cfg.IntervalDuration)
}

func TestValidationNamesTheKey(t *testing.T) {
	cases := map[string]string{
		"interval: 30s\n":                                         "interval",
		"interval: soon\n":                                        "interval",
		"lifecycle_component: a.b\n":                              "lifecycle_component",
		"lifecycle_component: 'a>'\n":                             "lifecycle_component",
		"features: {pki: true, ed25519: true}\n":                  "features",
		"features: {jwt: true}\n":                                 "jwt_verify_cert",
		"features: {jwt: true}\njwt_verify_cert: nothex\n":        "jwt_verify_cert",
		"features: {ed25519: true}\n":                             "jwt_signing_key",
		"loglevel: chatty\n":                                      "loglevel",
		"helper: /nonexistent/helper\n":                           "helper",
		"cert_deny_list: ['(']\n":                                 "cert_deny_list",
		"server_jwt_validity: 0s\n":                               "server_jwt_validity",
		"server_jwt_validity: soon\n":                             "server_jwt_validity",
		"lifecycle_component: 'a b'\n":                            "lifecycle_component",
		"helper_timeout: -1s\n":                                   "helper_timeout",
		"temporal: {codec_key_file: /nonexistent/key}\n":          "temporal.codec_key_file",
		"monitor_port: 70000\n":                                   "monitor_port",
		"health_port: -1\n":                                       "health_port",
		"monitor_port: 9000\nhealth_port: 9000\n":                 "health_port",
		"temporal: {plaintext: true, grpc_compression: brotli}\n": "temporal.grpc_compression",
		"workers: -1\n":                                           "workers",
		"temporal: {plaintext: true, workflow_cache_size: -1}\n":  "temporal.workflow_cache_size",
		"new_hosts_rate: -1\n":                                    "new_hosts_rate",
		"new_hosts_rate: 5\nnew_hosts_burst: 0\n":                 "new_hosts_burst",
	}
	for body, key := range cases {
		_, err := Load(writeConfig(t, body))
		require.Error(t, err, body)
		require.True(t, errors.Is(err, ErrInvalid), "%s: %v", body, err)
		require.Contains(t, err.Error(), key+":", body)
	}
}

func TestCodecKeyRequiredUnlessPlaintext(t *testing.T) {
	dir := t.TempDir()
	helper := filepath.Join(dir, "h")
	require.NoError(t, os.WriteFile(helper, []byte("#!/bin/sh\n"), 0o755))
	file := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("helper: "+helper+"\n"), 0o600))
	_, err := Load(file)
	require.ErrorContains(t, err, "temporal.codec_key_file")

	t.Setenv(CodecKeyEnv, "ab")
	_, err = Load(file)
	require.NoError(t, err)
}

func TestParseDuration(t *testing.T) {
	day := 24 * time.Hour
	for in, want := range map[string]time.Duration{"1m": time.Minute, "365d": 365 * day, "1y": 365 * day, "2w": 14 * day, "1.5h": 90 * time.Minute,
		"1h30m": 90 * time.Minute, "2D": 2 * day, "1W": 7 * day, "6M": 180 * day, "1Y": 365 * day} {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "d", "xd", "5"} {
		_, err := ParseDuration(bad)
		require.Error(t, err, bad)
	}
}

func TestTrimRegex(t *testing.T) {
	require.Equal(t, `\.choria$`, TrimRegex(`/\.choria$/`))
	require.Equal(t, `\.choria$`, TrimRegex(`\.choria$`))
}

// The helper line is split as the Choria Provisioner splits it (shell quoting rules), and its
// first word resolved the way exec will: on PATH, or as a path when it has a slash.
func TestSplitHelper(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "my helper.rb")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755))
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	interp := filepath.Join(bin, "fake-ruby")
	require.NoError(t, os.WriteFile(interp, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data.json"), []byte("{}"), 0o644))

	for line, want := range map[string][]string{
		"fake-ruby /etc/choria-provisioner/cfssl-helper.rb": {"fake-ruby", "/etc/choria-provisioner/cfssl-helper.rb"},
		`fake-ruby '` + script + `' --site "dc 1" x\ y`:     {"fake-ruby", script, "--site", "dc 1", "x y"},
		`"` + script + `" --tag=#1`:                         {script, "--tag=#1"},
		"  fake-ruby   a\tb  ":                              {"fake-ruby", "a", "b"},
		`fake-ruby "it's" 'say "hi"' ""`:                    {"fake-ruby", "it's", `say "hi"`, ""},
		"sh -c 'cat /dev/stdin'":                            {"sh", "-c", "cat /dev/stdin"},
	} {
		got, err := SplitHelper(line)
		require.NoError(t, err, line)
		require.Equal(t, want, got, line)
	}

	for line, words := range map[string][]string{
		"ruby-that-is-not-installed /etc/helper.rb": {`"ruby-that-is-not-installed"`, "PATH"},
		"/nonexistent/helper --x":                   {`"/nonexistent/helper"`, "no such file"},
		dir + "/bin":                                {`"` + bin + `"`, "not an executable"},
		filepath.Join(dir, "data.json"):             {"data.json", "not an executable file"},
		`fake-ruby 'unterminated`:                   {"Unterminated single-quoted"},
		`   `:                                       {"no command"},
	} {
		_, err := SplitHelper(line)
		require.Error(t, err, line)
		for _, w := range words {
			require.ErrorContains(t, err, w, line)
		}
	}

	// through Load, the error names the key and the word
	_, err := Load(writeConfig(t, "helper: ruby-that-is-not-installed /etc/helper.rb\n"))
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, `helper: "ruby-that-is-not-installed" is not an executable found on PATH`)
	cfg, err := Load(writeConfig(t, "helper: fake-ruby /etc/choria-provisioner/helper.rb --site 'dc 1'\n"))
	require.NoError(t, err)
	require.Equal(t, []string{"fake-ruby", "/etc/choria-provisioner/helper.rb", "--site", "dc 1"}, cfg.HelperCommand)
}

// What the Choria Provisioner accepted loads here too: the values its own parser took.
func TestWhatTheChoriaProvisionerAcceptedLoads(t *testing.T) {
	for body, check := range map[string]func(t *testing.T, c *Config){
		"lifecycle_component: ''\n":          func(t *testing.T, c *Config) { require.Equal(t, "provision_mode_server", c.LifecycleComponent) },
		"lifecycle_component: 'prov:mode'\n": func(t *testing.T, c *Config) { require.Equal(t, "prov:mode", c.LifecycleComponent) },
		"site: ''\n":                         func(t *testing.T, c *Config) { require.Equal(t, "", c.Site) },
		"server_jwt_validity: 30m\n":         func(t *testing.T, c *Config) { require.Equal(t, 30*time.Minute, c.ServerJWTValidityDuration) },
		"server_jwt_validity: ''\n":          func(t *testing.T, c *Config) { require.Equal(t, 365*24*time.Hour, c.ServerJWTValidityDuration) },
		"server_jwt_validity: 6M\n":          func(t *testing.T, c *Config) { require.Equal(t, 180*24*time.Hour, c.ServerJWTValidityDuration) },
		"loglevel: INFO\n":                   func(t *testing.T, c *Config) { require.Equal(t, "info", c.Loglevel) },
		"loglevel: trace\n":                  func(t *testing.T, c *Config) { require.Equal(t, "debug", c.Loglevel) },
		"loglevel: warning\n":                func(t *testing.T, c *Config) { require.Equal(t, "warn", c.Loglevel) },
		"workers: 0\n":                       func(t *testing.T, c *Config) { require.Equal(t, runtime.NumCPU(), c.Workers) },
		"features: {upgrades: true}\n": func(t *testing.T, c *Config) {
			require.Len(t, c.Warnings, 1)
			require.Contains(t, c.Warnings[0], "fail at the upgrade step")
		},
		"features: {upgrades: true}\nupgrades_optional: true\n": func(t *testing.T, c *Config) {
			require.Len(t, c.Warnings, 1)
			require.Contains(t, c.Warnings[0], "upgrades_optional")
		},
	} {
		cfg, err := Load(writeConfig(t, body))
		require.NoError(t, err, body)
		check(t, cfg)
	}
}

// temporal.local_activities, one of two speed switches once, means fast_mode now, and says so.
func TestLocalActivitiesMeansFastMode(t *testing.T) {
	cfg := &Config{Temporal: Temporal{LocalActivities: true, Plaintext: true, Address: "127.0.0.1:7233", Namespace: "default", TaskQueue: "tq"}}
	require.NoError(t, cfg.validateTemporal())
	require.True(t, cfg.Temporal.FastMode)
	require.Len(t, cfg.Warnings, 1)
	require.Contains(t, cfg.Warnings[0], "fast_mode")
}

// helper_env names more variables for the helper; the provisioner's own are never among them.
func TestHelperEnv(t *testing.T) {
	cfg, err := Load(writeConfig(t, "helper_env: [SITE_CMDB_URL, http_proxy]\n"))
	require.NoError(t, err)
	require.Equal(t, []string{"SITE_CMDB_URL", "http_proxy"}, cfg.HelperEnv)
	for _, bad := range []string{"PROVISIONER_CODEC_KEY", "provisioner_temporal__api_key", "NOT-A-NAME", "A=B", ""} {
		_, err := Load(writeConfig(t, "helper_env: ['"+bad+"']\n"))
		require.ErrorIs(t, err, ErrInvalid, bad)
		require.Contains(t, err.Error(), "helper_env", bad)
	}
}
