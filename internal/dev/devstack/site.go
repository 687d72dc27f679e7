package devstack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
)

// SiteOptions describe where a provisioner finds its broker and Temporal.
type SiteOptions struct {
	Dir               string
	BrokerURL         string
	TemporalAddress   string
	TemporalNamespace string // default "default"
	TaskQueue         string
	Helper            string
	Interval          string
	DeferDelay        string
	LogLevel          string
	LogFile           string
	MonitorPort       int
	MonitorAddress    string
	// HealthPort is written as health_port when set, with HealthAddress; negative writes 0
	// (health off: processes of a test share the machine). 0 leaves the default (9465).
	HealthPort    int
	HealthAddress string
	// TemporalTLS and TemporalAPIKeyFile are written as temporal.tls and temporal.api_key_file.
	TemporalTLS        config.TLS
	TemporalAPIKeyFile string
}

// SiteFiles are the provisioner's configuration files for a site.
type SiteFiles struct {
	ConfigFile   string // provisioner YAML
	ClientConfig string // Choria client config of the provisioner (provisioning account)
	AdminConfig  string // Choria client config of a fleet administrator (choria account)
	CodecKeyFile string
	// SecretsKeyFile is the workers' own key for the helper's private keys (secrets_key_file)
	SecretsKeyFile string
}

// ExampleHelperCommand is the command line of the example helper beside self: the stand-alone
// binary when present (it starts in milliseconds), else self's subcommand (~0.3 s of go-choria
// start-up per call).
func ExampleHelperCommand(self, brokerURL string, c *Credentials) string {
	helper := self + " example-helper"
	if st, err := os.Stat(filepath.Join(filepath.Dir(self), "example-helper")); err == nil && !st.IsDir() {
		helper = filepath.Join(filepath.Dir(self), "example-helper")
	}
	if c.Mode == ModePKI {
		return fmt.Sprintf("%s --broker %s --ca-cert %s --ca-key %s", helper, brokerURL, c.PKI.CACert, c.PKI.CAKey)
	}
	return fmt.Sprintf("%s --broker %s --issuer %s", helper, brokerURL, c.IssuerPublic)
}

// WriteSiteFiles writes the provisioner configuration for an Organization Issuer site made by
// LoadOrCreateCredentials. An existing codec key is kept.
func WriteSiteFiles(c *Credentials, o SiteOptions) (*SiteFiles, error) {
	for _, d := range []struct {
		field *string
		def   string
	}{
		{&o.TaskQueue, "choria-provisioner"}, {&o.TemporalNamespace, "default"}, {&o.Interval, "1m"},
		{&o.DeferDelay, "10s"}, {&o.LogLevel, "info"}, {&o.MonitorAddress, "127.0.0.1"},
	} {
		if *d.field == "" {
			*d.field = d.def
		}
	}
	f := &SiteFiles{
		ConfigFile:     filepath.Join(o.Dir, "provisioner.yaml"),
		ClientConfig:   filepath.Join(o.Dir, "client.conf"),
		AdminConfig:    filepath.Join(o.Dir, "admin.conf"),
		CodecKeyFile:   filepath.Join(o.Dir, "codec.key"),
		SecretsKeyFile: filepath.Join(o.Dir, "secrets.key"),
	}
	clientConf := func(identity, collective string, admin bool) string {
		return fmt.Sprintf(`identity = %s
collectives = %s
main_collective = %s
loglevel = warn
plugin.choria.middleware_hosts = %s
plugin.choria.use_srv = false
%s`, identity, collective, collective, o.BrokerURL, c.ClientSecurity(admin))
	}
	fleetCollective := "choria"
	if c.Mode == ModePKI {
		fleetCollective = "mcollective" // go-choria's default without protocol v2 security
	}
	if err := os.WriteFile(f.ClientConfig, []byte(clientConf(ProvisionerCallerID, "provisioning", false)), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.AdminConfig, []byte(clientConf("admin", fleetCollective, true)), 0o600); err != nil {
		return nil, err
	}
	for _, key := range []string{f.CodecKeyFile, f.SecretsKeyFile} {
		if _, err := os.Stat(key); err != nil {
			if err := os.WriteFile(key, []byte(codec.NewKey()+"\n"), 0o600); err != nil {
				return nil, err
			}
		}
	}
	yaml := fmt.Sprintf(`# Every key is a Choria Provisioner key except temporal, choria_config, defer_delay and
# monitor_address (docs/configuration.md).
interval: %s
site: dev
loglevel: %s
logfile: %q
helper: %q
token: %q
monitor_port: %d
monitor_address: %s
broker_provisioning_password: %q
lifecycle_component: provision_mode_server
%s
server_jwt_validity: 365d
defer_delay: %s
choria_config: %q
secrets_key_file: %q
temporal:
  address: %q
  namespace: %s
  task_queue: %s
  codec_key_file: %q
%s%s`, o.Interval, o.LogLevel, o.LogFile, o.Helper, c.Token, o.MonitorPort, o.MonitorAddress, c.ProvisioningPassword,
		c.featureKeys(), o.DeferDelay, f.ClientConfig, f.SecretsKeyFile, o.TemporalAddress, o.TemporalNamespace, o.TaskQueue, f.CodecKeyFile, temporalAuthYAML(o.TemporalTLS, o.TemporalAPIKeyFile),
		healthYAML(o.HealthPort, o.HealthAddress))
	if err := os.WriteFile(f.ConfigFile, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	return f, nil
}

// temporalAuthYAML is the temporal section's tls and api_key_file keys, indented under temporal.
func temporalAuthYAML(t config.TLS, apiKeyFile string) string {
	var b strings.Builder
	if t.On() {
		b.WriteString("  tls:\n")
		if t.Enabled {
			b.WriteString("    enabled: true\n")
		}
		for _, kv := range [][2]string{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"server_name", t.ServerName}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, "    %s: %q\n", kv[0], kv[1])
			}
		}
		if t.InsecureSkipVerify {
			b.WriteString("    insecure_skip_verify: true\n")
		}
	}
	if apiKeyFile != "" {
		fmt.Fprintf(&b, "  api_key_file: %q\n", apiKeyFile)
	}
	return b.String()
}

// featureKeys are the provisioner's feature and key settings for the network's security mode.
func (c *Credentials) featureKeys() string {
	if c.Mode == ModePKI {
		return fmt.Sprintf(`features:
  jwt: true
  pki: true
jwt_verify_cert: %q`, c.PKI.SignerPublic)
	}
	return fmt.Sprintf(`features:
  jwt: true
  ed25519: true
jwt_verify_cert: %q
jwt_signing_key: %q
jwt_signing_token: %q`, c.IssuerPublic, c.ProvisionerSeed, c.ProvisionerJWT)
}

// healthYAML is health_port and health_address as SiteOptions asks.
func healthYAML(port int, address string) string {
	switch {
	case port < 0:
		return "health_port: 0\n"
	case port == 0:
		return ""
	}
	return fmt.Sprintf("health_port: %d\nhealth_address: %q\n", port, address)
}
