package devstack

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/config"
)

// The dev stack's provisioner configuration carries temporal.tls and the API key file when it is
// pointed at a Temporal that wants them, and the configuration loads with them.
func TestSiteFilesCarryTemporalTLS(t *testing.T) {
	dir := t.TempDir()
	creds, err := LoadOrCreateCredentials(filepath.Join(dir, "credentials"), "nats://127.0.0.1:4222")
	require.NoError(t, err)
	certs, err := CreateTemporalTLS(filepath.Join(dir, "tls"))
	require.NoError(t, err)
	apiKey := filepath.Join(dir, "api.key")
	require.NoError(t, os.WriteFile(apiKey, []byte("k\n"), 0o600))
	want := certs.Client()
	files, err := WriteSiteFiles(creds, SiteOptions{Dir: dir, BrokerURL: "nats://127.0.0.1:4222", TemporalAddress: "127.0.0.1:7233",
		TemporalNamespace: "provisioning", Helper: "/bin/sh", TemporalTLS: want, TemporalAPIKeyFile: apiKey})
	require.NoError(t, err)
	cfg, err := config.Load(files.ConfigFile)
	require.NoError(t, err)
	require.Equal(t, want, cfg.Temporal.TLS)
	require.Equal(t, apiKey, cfg.Temporal.APIKeyFile)
	require.Equal(t, "provisioning", cfg.Temporal.Namespace)

	files, err = WriteSiteFiles(creds, SiteOptions{Dir: dir, BrokerURL: "nats://127.0.0.1:4222", TemporalAddress: "127.0.0.1:7233", Helper: "/bin/sh"})
	require.NoError(t, err)
	cfg, err = config.Load(files.ConfigFile)
	require.NoError(t, err)
	require.False(t, cfg.Temporal.TLS.On())
	require.Equal(t, "default", cfg.Temporal.Namespace)
}
