package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/choria-temporal/provisioner/internal/codec"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
)

// checkLines maps each check's name to its status, for the lines of a `check` report.
var checkLine = regexp.MustCompile(`^(ok|warn|FAIL|skip)\s+(\S+(?: \S+)?)\s{2,}`)

func statuses(out string) map[string][]string {
	m := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		if s := checkLine.FindStringSubmatch(l); s != nil {
			m[strings.TrimSpace(s[2])] = append(m[strings.TrimSpace(s[2])], s[1])
		}
	}
	return m
}

// The preflight against the dev stack passes every check once a host has been provisioned (so
// the codec check decrypts a real workflow), then fails the right check, and only that one, with
// each dependency broken in turn.
func TestIntegrationCheckPreflight(t *testing.T) {
	e := newEnv(t, envOptions{servers: 1})
	e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)

	me, err := user.Current()
	require.NoError(t, err)
	noUnit := t.TempDir() // no unit installed under it: no sandbox, this user's permissions
	check := func(env []string, args ...string) (string, int, map[string][]string) {
		out, code := e.run(env, append([]string{"check", "--config", e.stack.ConfigFile, "--user", me.Username, "--unit-root", noUnit, "--timeout", "4s"}, args...)...)
		return out, code, statuses(out)
	}

	out, code, st := check(nil)
	t.Logf("check on the dev stack:\n%s", out)
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "FAIL")
	require.Contains(t, out, "every check passed")
	for _, name := range []string{"config", "file", "helper", "signer", "codec key", "broker", "temporal", "namespace", "search attributes", "codec", "renewal"} {
		require.Contains(t, st, name, "a line for %s", name)
		for _, s := range st[name] {
			require.Equal(t, "ok", s, "%s in\n%s", name, out)
		}
	}
	require.Regexp(t, `ok\s+codec\s+the keys decrypt the latest host workflow \(provision:`, out)
	require.Regexp(t, `ok\s+broker\s+connected to nats://127.0.0.1:\d+ as caller .*NATS user provisioner`, out)
	require.Regexp(t, `ok\s+signer\s+jwt_signing_token expires`, out)

	// failsOnly asserts exit 1 and that exactly the named checks failed
	failsOnly := func(out string, code int, st map[string][]string, names ...string) {
		t.Helper()
		t.Logf("check:\n%s", out)
		require.Equal(t, 1, code, out)
		var failed []string
		for n, ss := range st {
			for _, s := range ss {
				if s == "FAIL" {
					failed = append(failed, n)
				}
			}
		}
		require.ElementsMatch(t, names, dedupe(failed), out)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "FAIL") {
				require.Contains(t, l, " -> ", "a failing line says what to do: %s", l)
			}
		}
	}

	// renewal on, but setup has not made its Schedule: nothing would renew
	out, code, st = check([]string{"PROVISIONER_RENEWAL__ENABLED=true", "PROVISIONER_RENEWAL__CHORIA_CONFIG=" + e.stack.AdminConfig})
	failsOnly(out, code, st, "renewal")
	require.Contains(t, out, "renewal is enabled but there is no Schedule renewal:")

	closed, err := devstack.FreePort()
	require.NoError(t, err)

	t.Run("broker down", func(t *testing.T) {
		b, err := os.ReadFile(e.stack.ClientConfig)
		require.NoError(t, err)
		conf := regexp.MustCompile(`(?m)^plugin.choria.middleware_hosts = .*$`).ReplaceAllString(string(b), fmt.Sprintf("plugin.choria.middleware_hosts = nats://127.0.0.1:%d", closed))
		f := filepath.Join(t.TempDir(), "client.conf")
		require.NoError(t, os.WriteFile(f, []byte(conf), 0o600))
		out, code, st := check(nil, "--choria-config", f)
		failsOnly(out, code, st, "broker")
		require.Contains(t, out, fmt.Sprintf("127.0.0.1:%d", closed))
	})
	t.Run("temporal down", func(t *testing.T) {
		out, code, st := check([]string{fmt.Sprintf("PROVISIONER_TEMPORAL__ADDRESS=127.0.0.1:%d", closed)})
		failsOnly(out, code, st, "temporal")
		require.NotContains(t, st, "namespace", "nothing is asked of a Temporal that is not there")
	})
	t.Run("TLS to a frontend without it", func(t *testing.T) {
		out, code, st := check([]string{"PROVISIONER_TEMPORAL__TLS__ENABLED=true"})
		failsOnly(out, code, st, "temporal")
	})
	t.Run("namespace missing", func(t *testing.T) {
		out, code, st := check([]string{"PROVISIONER_TEMPORAL__NAMESPACE=check-no-such-namespace"})
		failsOnly(out, code, st, "namespace")
		require.Contains(t, out, "temporal operator namespace create --namespace check-no-such-namespace")
	})
	t.Run("search attributes missing", func(t *testing.T) {
		_, err := e.client.WorkflowService().RegisterNamespace(context.Background(), &workflowservice.RegisterNamespaceRequest{
			Namespace: "check-bare", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
		require.NoError(t, err)
		var out string
		require.Eventually(t, func() bool { // a new namespace takes a moment to reach the frontend's cache
			out, _, _ = check([]string{"PROVISIONER_TEMPORAL__NAMESPACE=check-bare"})
			return !strings.Contains(out, "check-bare does not exist")
		}, 30*time.Second, time.Second)
		out, code, st := check([]string{"PROVISIONER_TEMPORAL__NAMESPACE=check-bare"})
		failsOnly(out, code, st, "search attributes")
		require.Contains(t, out, "choria-provisioner setup --config "+e.stack.ConfigFile)
	})
	t.Run("another replica's codec key", func(t *testing.T) {
		out, code, st := check([]string{"PROVISIONER_CODEC_KEY=" + codec.NewKey()})
		failsOnly(out, code, st, "codec")
		require.Contains(t, out, "cannot decrypt provision:")
	})
	t.Run("codec key unusable", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "codec.key")
		require.NoError(t, os.WriteFile(f, []byte("not-hex\n"), 0o600))
		out, code, st := check([]string{"PROVISIONER_TEMPORAL__CODEC_KEY_FILE=" + f})
		failsOnly(out, code, st, "codec key")
	})
	t.Run("helper missing", func(t *testing.T) {
		out, code, st := check([]string{"PROVISIONER_HELPER=/nonexistent/helper --site x"})
		failsOnly(out, code, st, "config", "helper") // validation stops at it too
	})
	t.Run("helper interpreter missing", func(t *testing.T) {
		script := filepath.Join(t.TempDir(), "helper.rb")
		marker := script + ".ran"
		require.NoError(t, os.WriteFile(script, []byte("#!/nonexistent/ruby\ntouch "+marker+"\n"), 0o755))
		out, code, st := check([]string{"PROVISIONER_HELPER=" + script})
		failsOnly(out, code, st, "helper")
		require.Contains(t, out, "/nonexistent/ruby")
		require.NoFileExists(t, marker, "check never runs the helper")
	})
	t.Run("signer token of another key", func(t *testing.T) {
		out, code, st := check([]string{"PROVISIONER_JWT_SIGNING_TOKEN=" + e.stack.Creds.AdminJWT})
		failsOnly(out, code, st, "signer")
	})
	t.Run("a typo in the file", func(t *testing.T) {
		b, err := os.ReadFile(e.stack.ConfigFile)
		require.NoError(t, err)
		f := filepath.Join(t.TempDir(), "provisioner.yaml")
		require.NoError(t, os.WriteFile(f, append(b, "\ntemporal_adress: 127.0.0.1:7233\n"...), 0o600))
		out, code := e.run(nil, "check", "--config", f, "--user", me.Username, "--unit-root", noUnit, "--timeout", "4s")
		failsOnly(out, code, statuses(out), "config")
		require.Contains(t, out, "unknown key temporal_adress: did you mean temporal.address?")
		// the service does not start on it either
		out = startRefused(t, nil, "run", "--config", f)
		require.Contains(t, out, "unknown key temporal_adress: did you mean temporal.address?")
	})
	t.Run("a typo in a variable", func(t *testing.T) {
		out, code, st := check([]string{"PROVISIONER_TEMPORAL_ADDRESS=127.0.0.1:7233"})
		failsOnly(out, code, st, "config")
		require.Contains(t, out, "PROVISIONER_TEMPORAL_ADDRESS is not a known variable: did you mean PROVISIONER_TEMPORAL__ADDRESS?")
		out = startRefused(t, []string{"PROVISIONER_TEMPORAL_ADDRESS=127.0.0.1:7233"}, "run", "--config", e.stack.ConfigFile)
		require.Contains(t, out, "PROVISIONER_TEMPORAL_ADDRESS is not a known variable: did you mean PROVISIONER_TEMPORAL__ADDRESS?")
	})
	t.Run("codec key readable by others", func(t *testing.T) {
		b, err := os.ReadFile(e.stack.CodecKeyFile)
		require.NoError(t, err)
		f := filepath.Join(t.TempDir(), "codec.key")
		require.NoError(t, os.WriteFile(f, b, 0o600))
		require.NoError(t, os.Chmod(f, 0o644))
		out, code, st := check([]string{"PROVISIONER_TEMPORAL__CODEC_KEY_FILE=" + f})
		failsOnly(out, code, st, "config", "file")
		require.Contains(t, out, f+" is readable by others (mode 0644)")
		require.Contains(t, out, "chmod 600 "+f)
	})
	t.Run("the Choria identity's key readable by others", func(t *testing.T) {
		b, err := os.ReadFile(e.stack.ClientConfig)
		require.NoError(t, err)
		key := regexp.MustCompile(`(?m)^(plugin\.security\.(?:choria\.seed_file|file\.key)) = (.*)$`)
		m := key.FindSubmatch(b)
		require.NotNil(t, m, "the dev stack's client configuration names its key")
		seed, err := os.ReadFile(string(m[2]))
		require.NoError(t, err)
		dir := t.TempDir()
		f := filepath.Join(dir, "identity.key")
		require.NoError(t, os.WriteFile(f, seed, 0o600))
		require.NoError(t, os.Chmod(f, 0o644))
		conf := filepath.Join(dir, "client.conf")
		require.NoError(t, os.WriteFile(conf, key.ReplaceAll(b, []byte("$1 = "+f)), 0o600))
		out, code, st := check(nil, "--choria-config", conf)
		require.Equal(t, 0, code, "go-choria reads it, as the Choria Provisioner did: a warning, not a failure\n%s", out)
		require.Contains(t, st["file"], "warn", out)
		require.Contains(t, out, f+": readable by others (mode 0644)")
		require.Contains(t, out, "chmod 600 "+f)
	})
	t.Run("file unreadable by the service user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("switching to another user needs root")
		}
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Skip("no user nobody on this machine")
		}
		// the binary must be where nobody can run it; the stack's files stay root's, 0600 in 0700
		dir, err := os.MkdirTemp("", "check-bin-")
		require.NoError(t, err)
		defer os.RemoveAll(dir)
		require.NoError(t, os.Chmod(dir, 0o755))
		bin := filepath.Join(dir, "choria-provisioner")
		b, err := os.ReadFile(selfBinary)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(bin, b, 0o755))
		cfgDir := filepath.Dir(e.stack.ConfigFile)
		out, code := runBinary(t, bin, nil, "check", "--config", e.stack.ConfigFile, "--user", nobody.Username, "--unit-root", noUnit, "--timeout", "4s")
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "checking as nobody")
		require.Regexp(t, `FAIL\s+config\s+.*permission denied`, out)
		require.Contains(t, out, fmt.Sprintf("let nobody into %s", firstClosedDir(t, cfgDir)))
	})
}

// startRefused runs the service, which must exit non-zero at once (bounded: a service that
// started after all is killed and fails the test); its output.
func startRefused(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, selfBinary, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "the service started:\n%s", out)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the service must refuse to start:\n%s", out)
	return string(out)
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// firstClosedDir is the first directory above and including dir that others cannot enter.
func firstClosedDir(t *testing.T, dir string) string {
	var dirs []string
	for d := dir; d != "/"; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		st, err := os.Stat(d)
		require.NoError(t, err)
		if st.Mode().Perm()&0o001 == 0 {
			return d
		}
	}
	t.Fatalf("every directory above %s is open to others", dir)
	return ""
}
