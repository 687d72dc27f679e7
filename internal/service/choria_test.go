package service

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/choria-io/go-choria/protocol"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/config"
)

// choria_insecure does what it did for the Choria Provisioner: a plain connection (no TLS, the
// file provider) and unsigned requests. Only the framework's settings are checked here; no test
// runs a broker without TLS.
func TestChoriaInsecure(t *testing.T) {
	before := protocol.Secure
	t.Cleanup(func() { protocol.Secure = before })
	file := filepath.Join(t.TempDir(), "client.conf")
	require.NoError(t, os.WriteFile(file, []byte("identity = prov\nplugin.choria.middleware_hosts = nats://127.0.0.1:4222\n"), 0o600))

	fw, err := NewChoriaClientFramework(&config.Config{ChoriaConfig: file, Insecure: true}, "provisioning")
	require.NoError(t, err)
	require.True(t, fw.Configuration().DisableTLS)
	require.Equal(t, "file", fw.Configuration().Choria.SecurityProvider)
	require.Equal(t, "false", protocol.Secure)
	require.Equal(t, []string{"provisioning"}, fw.Configuration().Collectives)
}

// Without choria_config or --choria-config the user's Choria client configuration is used, as
// the Choria Provisioner's --choria-config defaulted to it; a missing one is named.
func TestChoriaConfigDefault(t *testing.T) {
	before := protocol.Secure
	t.Cleanup(func() { protocol.Secure = before })
	home := t.TempDir()
	t.Setenv("HOME", home)
	rc := filepath.Join(home, ".choriarc")
	require.NoError(t, os.WriteFile(rc, []byte("identity = from-choriarc\nplugin.security.provider = file\n"), 0o600))
	_, err := NewChoriaClientFramework(&config.Config{Insecure: true}, "")
	require.NoError(t, err)

	require.NoError(t, os.Remove(rc))
	if _, err := os.Stat("/etc/choria/client.conf"); err == nil {
		t.Skip("this machine has /etc/choria/client.conf")
	}
	_, err = NewChoriaClientFramework(&config.Config{}, "")
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorContains(t, err, "choria_config: not set")
}
