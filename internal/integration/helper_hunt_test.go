package integration

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
)

// A helper that hunts for the provisioner's secrets finds none of them. The provisioner runs as a
// site runs it (its own process, the codec key and the provisioning token in its environment as
// PROVISIONER_* overrides may put them), with helper_user naming another user. The helper reads
// its own environment, its parent's (/proc/$PPID/environ), and the codec, secrets and signing key
// files, whose directory it may enter; then it answers as the example helper does. Each read is
// refused, nothing of a key is in what it gathered, and the server is provisioned.
func TestIntegrationHelperHuntsForSecretsAndFindsNone(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the Temporal dev server, a broker and go-choria servers")
	}
	if os.Getuid() != 0 {
		t.Skip("helper_user needs a provisioner that may switch users (root here; CAP_SETUID and CAP_SETGID in a site's unit)")
	}
	nobody, err := user.Lookup("nobody")
	require.NoError(t, err)
	// what the helper may run and write: a directory of its own, outside the stack's (0700)
	shared, err := os.MkdirTemp("", "helper-hunt-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(shared) })
	require.NoError(t, os.Chmod(shared, 0o777))
	helperBin := filepath.Join(shared, "example-helper")
	copyExecutable(t, filepath.Join(filepath.Dir(selfBinary), "example-helper"), helperBin)

	var codecFile, signingKey string
	e := newEnv(t, envOptions{servers: 1, extraConfig: "helper_user: nobody\n", helper: func(s *devstack.Stack) string {
		// the stack's directory open to all: the key files' own modes are what keeps them
		require.NoError(t, os.Chmod(s.Opts.Dir, 0o755))
		codecFile = s.CodecKeyFile
		example := strings.Fields(s.HelperCommand)
		script := filepath.Join(shared, "hunting-helper.sh")
		body := fmt.Sprintf(`#!/bin/sh
input=$(cat)
out=%[1]s/hunt-$$.txt
{
  echo "uid=$(id -u)"
  echo "--- own environment"; env
  echo "--- parent's environment"; tr '\0' '\n' < /proc/$PPID/environ
  echo "--- parent's memory map"; cat /proc/$PPID/maps | head -3
  for f in %[2]s; do echo "--- $f"; cat "$f"; done
} > "$out" 2>&1
printf '%%s' "$input" | %[3]s %[4]s
`, shared, strings.Join([]string{s.CodecKeyFile, filepath.Join(s.Opts.Dir, "secrets.key"), filepath.Join(s.Opts.Dir, "*.seed"), filepath.Join(s.Opts.Dir, "*.key")}, " "),
			helperBin, strings.Join(example[1:], " "))
		require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
		return script
	}})
	signingKey = e.cfg.JWTSigningKey
	codecKey, err := os.ReadFile(codecFile)
	require.NoError(t, err)
	secretsKey, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, "secrets.key"))
	require.NoError(t, err)
	seed, err := os.ReadFile(signingKey)
	require.NoError(t, err)

	e.processProvisioner("hunted", config.CodecKeyEnv+"="+strings.TrimSpace(string(codecKey)), "PROVISIONER_TOKEN="+e.stack.Creds.Token)
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)

	hunts, err := filepath.Glob(filepath.Join(shared, "hunt-*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, hunts, "the helper ran and wrote what it found")
	for _, h := range hunts {
		b, err := os.ReadFile(h)
		require.NoError(t, err)
		found := string(b)
		t.Logf("what the helper found (%s):\n%s", filepath.Base(h), found)
		require.Contains(t, found, "uid="+nobody.Uid, "the helper ran as helper_user")
		require.Contains(t, found, "/proc/", "the parent's environment was looked for")
		require.GreaterOrEqual(t, strings.Count(found, "Permission denied"), 4, "the parent's environment and memory map and each key file refused")
		for name, secret := range map[string]string{"the codec key": strings.TrimSpace(string(codecKey)),
			"the secrets key": strings.TrimSpace(string(secretsKey)), "the signing seed": strings.TrimSpace(string(seed)),
			"the provisioning token": e.stack.Creds.Token} {
			require.NotContains(t, found, secret, "%s reached the helper", name)
		}
		require.NotContains(t, found, config.EnvPrefix, "no PROVISIONER_ variable reached the helper")
	}
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}
