package config

import (
	"errors"
	"os"
	"path/filepath"
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
		"interval: 30s\n":                                  "interval",
		"interval: soon\n":                                 "interval",
		"lifecycle_component: a.b\n":                       "lifecycle_component",
		"lifecycle_component: 'a>'\n":                      "lifecycle_component",
		"features: {pki: true, ed25519: true}\n":           "features",
		"features: {jwt: true}\n":                          "jwt_verify_cert",
		"features: {jwt: true}\njwt_verify_cert: nothex\n": "jwt_verify_cert",
		"features: {ed25519: true}\n":                      "jwt_signing_key",
		"loglevel: chatty\n":                               "loglevel",
		"helper: /nonexistent/helper\n":                    "helper",
		"cert_deny_list: ['(']\n":                          "cert_deny_list",
		"server_jwt_validity: 30m\n":                       "server_jwt_validity",
		"features: {upgrades: true}\n":                     "upgrades_repository",
		"helper_timeout: -1s\n":                            "helper_timeout",
		"temporal: {codec_key_file: /nonexistent/key}\n":   "temporal.codec_key_file",
		"monitor_port: 70000\n":                            "monitor_port",
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
	for in, want := range map[string]time.Duration{"1m": time.Minute, "365d": 365 * 24 * time.Hour, "1y": 365 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "1.5h": 90 * time.Minute} {
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
