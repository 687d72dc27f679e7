package packaging

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
)

// keys lists every configuration key of t (koanf tags, nested with dots).
func keys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("koanf")
		if tag == "" || tag == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			out = append(out, keys(f.Type, prefix+tag+".")...)
			continue
		}
		out = append(out, prefix+tag)
	}
	return out
}

// uncomment turns the example's commented-out settings ("# key: value", "#   - item") into
// settings, leaving the prose comments alone.
var commented = regexp.MustCompile(`(?m)^(\s*)# (\s*)([a-z0-9_]+:(?: .*|$)|- .*)$`)

// The example configuration the package installs lists every key the provisioner reads, and
// loads, as shipped and with every commented-out default turned on.
func TestExampleConfigHasEveryKey(t *testing.T) {
	b, err := os.ReadFile("choria-provisioner.yaml")
	require.NoError(t, err)
	all := commented.ReplaceAllString(string(b), "$1$2$3")

	// each key at its place in the YAML: top-level keys at column 0, nested ones indented under
	// their section
	for _, k := range keys(reflect.TypeOf(config.Config{}), "") {
		if k == "temporal.api_key" {
			require.Contains(t, all, "api_key)", "the example says where the API key goes")
			continue // never in the YAML: the file is refused if it holds it
		}
		block := all
		parts := strings.Split(k, ".")
		for i, p := range parts {
			indent := strings.Repeat("  ", i)
			if i == len(parts)-1 {
				require.Regexp(t, `(?m)^`+indent+regexp.QuoteMeta(p)+`:`, block, "the example lists %s", k)
				break
			}
			m := regexp.MustCompile(`(?m)^` + indent + regexp.QuoteMeta(p) + `:\n((?:` + indent + `[ \t]+.*\n|[ \t]*#.*\n)*)`).FindStringSubmatch(block)
			require.NotNil(t, m, "the example has a %s section for %s", p, k)
			block = m[1]
		}
	}

	// a site supplies the helper and the codec key; then it is valid as shipped and with every
	// default spelled out
	dir := t.TempDir()
	key := filepath.Join(dir, "codec.key")
	require.NoError(t, os.WriteFile(key, []byte(codec.NewKey()+"\n"), 0o600))
	t.Setenv("PROVISIONER_HELPER", "/bin/sh")
	t.Setenv("PROVISIONER_TEMPORAL__CODEC_KEY_FILE", key)
	for name, body := range map[string]string{"as shipped": string(b), "every default on": all} {
		f := filepath.Join(dir, "example.yaml")
		require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
		cfg, err := config.Load(f)
		require.NoError(t, err, name)
		require.Equal(t, "/var/log/choria-provisioner.log", cfg.Logfile, name)
		require.Equal(t, "choria-provisioner", cfg.Temporal.TaskQueue, name)
	}
}

// The example says what temporal.fast_mode and temporal.local_activities are now (config.Temporal):
// fast mode runs the steps locally except configure, and local_activities is that switch.
func TestExampleDescribesFastModeAsItIs(t *testing.T) {
	b, err := os.ReadFile("choria-provisioner.yaml")
	require.NoError(t, err)
	s := string(b)
	require.Regexp(t, `(?m)^\s*# fast_mode: false\s+# the steps as local activities, configure excepted`, s)
	require.Regexp(t, `(?m)^\s*# local_activities: false\s+# accepted: the same switch as fast_mode`, s)
	require.NotContains(t, s, "every step a local activity", "configure is never a local activity")
}
