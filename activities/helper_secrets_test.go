package activities

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A helper's stdout may hold a private key (pki): when the helper fails, no byte of it is in the
// error, which goes to history and logs; what it says on stderr is, bounded and cleaned.
func TestHelperFailuresQuoteNoStdout(t *testing.T) {
	const pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
	for _, body := range []string{
		"printf '%b' '" + pem + "'",
		"printf '%b' '" + pem + "'; exit 1",
		`printf '%b' '{"configuration":{"k":"` + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + `"}} ` + pem + "'",
		`printf '{"defer":"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"}'`,
		`printf '{"server_claims":{"exp":"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"}}'`,
		`printf '{"defer":1e999}'`,
		"printf '%b' '" + pem + "'; printf '%b' '\\033[2Jwiped\\033]0;title\\007' >&2; exit 2",
	} {
		_, err := runHelper(t, body, 5*time.Second)
		require.Error(t, err, body)
		for _, b := range []string{"BEGIN", "PRIVATE", "MIIEv", "END", "-----", "1e999"} {
			require.NotContains(t, err.Error(), b, body)
		}
		require.NotContains(t, err.Error(), "\x1b", body)
		if strings.Contains(body, "wiped") {
			require.Contains(t, err.Error(), "stderr: wiped", "stderr is kept, without its escapes")
		}
	}
}

// The helper runs with the documented variables and those helper_env names, never the
// provisioner's keys.
func TestHelperEnvironmentIsClean(t *testing.T) {
	t.Setenv("PROVISIONER_CODEC_KEY", "c0dec-key-secret")
	t.Setenv("PROVISIONER_TEMPORAL__API_KEY", "api-key-secret")
	t.Setenv("PROVISIONER_TOKEN", "token-secret")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret")
	t.Setenv("SITE_CMDB_URL", "https://cmdb.example")
	t.Setenv("LANG", "C.UTF-8")
	envFile := filepath.Join(t.TempDir(), "env")
	h := &HelperRunner{Command: script(t, "env > "+envFile+"; echo '{\"defer\":true}'"), Timeout: 5 * time.Second,
		Env: []string{"PATH", "LANG", "SITE_CMDB_URL", "NOT_SET_ANYWHERE"}}
	_, err := h.Run(t.Context(), map[string]string{})
	require.NoError(t, err)
	b, err := os.ReadFile(envFile)
	require.NoError(t, err)
	seen := string(b)
	for _, secret := range []string{"secret", "PROVISIONER_", "AWS_"} {
		require.NotContains(t, seen, secret)
	}
	require.Contains(t, seen, "PATH="+os.Getenv("PATH"))
	require.Contains(t, seen, "LANG=C.UTF-8")
	require.Contains(t, seen, "SITE_CMDB_URL=https://cmdb.example")
	require.NotContains(t, seen, "NOT_SET_ANYWHERE")
}
