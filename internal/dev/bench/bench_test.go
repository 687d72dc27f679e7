package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAddHelperArgsToTheSitesHelperLine(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "provisioner.yaml")
	require.NoError(t, os.WriteFile(conf, []byte("site: dev\nhelper: \"/opt/bin/example-helper --broker nats://127.0.0.1:4222\"\ntoken: \"x\"\n"), 0o600))
	require.NoError(t, addHelperArgs(conf, []string{"--delay", "100ms"}))
	b, err := os.ReadFile(conf)
	require.NoError(t, err)
	require.Equal(t, "site: dev\nhelper: \"/opt/bin/example-helper --broker nats://127.0.0.1:4222 --delay 100ms\"\ntoken: \"x\"\n", string(b))

	require.NoError(t, addHelperArgs(conf, nil), "no args: the file as it is")
	require.NoError(t, os.WriteFile(conf, []byte("site: dev\n"), 0o600))
	require.ErrorContains(t, addHelperArgs(conf, []string{"--delay", "1s"}), "no helper line")
}
