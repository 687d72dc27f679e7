package config

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
)

// OtherEnv are the PROVISIONER_ variables that are not configuration keys: read directly by the
// provisioner (secrets that must never come from YAML) or by the project's scripts and dev tools,
// which a developer's shell may export while it runs the provisioner. Strict loading accepts
// them; every other PROVISIONER_ variable must name a key.
var OtherEnv = map[string]string{
	CodecKeyEnv:                      "the payload codec keys",
	"PROVISIONER_CODEC_SERVER_TOKEN": "the codec server's bearer token",
	"PROVISIONER_PG_BINDIR":          "the dev stack's PostgreSQL binaries",
	"PROVISIONER_DOCKER_POOL":        "the compose tests' Docker address pool",
	"PROVISIONER_DEBIAN_MIRROR":      "the compose images' Debian mirror",
	"PROVISIONER_DEBIAN_SECURITY":    "the compose images' Debian security mirror",
	"PROVISIONER_MODPROXY_PORT":      "the compose images' module proxy port",
	"PROVISIONER_ORIGINAL_HELPERS":   "the compose test's paths to the Choria Provisioner's own helpers",
}

// keySet is what the Config struct's koanf tags allow: leaves (a value), sections (a struct,
// whose keys are listed), and free-form maps (any key below them).
type keySet struct {
	leaves, sections, freeForm map[string]bool
}

// knownKeys reads the koanf tags of Config, so a field added with a tag is known at once.
func knownKeys() keySet {
	ks := keySet{leaves: map[string]bool{}, sections: map[string]bool{}, freeForm: map[string]bool{}}
	ks.walk(reflect.TypeOf(Config{}), "")
	return ks
}

func (ks keySet) walk(t reflect.Type, prefix string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		key := prefix + tag
		switch f.Type.Kind() {
		case reflect.Struct:
			ks.sections[key] = true
			ks.walk(f.Type, key+".")
		case reflect.Map:
			ks.freeForm[key] = true
		default:
			ks.leaves[key] = true
		}
	}
}

// known says whether key (koanf's dotted form) is a key of the configuration. Keys match in any
// case, as the decoder matches them.
func (ks keySet) known(key string, sectionOK bool) bool {
	key = strings.ToLower(key)
	if ks.leaves[key] || ks.freeForm[key] || (sectionOK && ks.sections[key]) {
		return true
	}
	for p := range ks.freeForm {
		if strings.HasPrefix(key, p+".") {
			return true
		}
	}
	return false
}

// nearest is the known leaf closest to key, or "" when none is close enough to be a typo of it.
func (ks keySet) nearest(key string) string {
	key = strings.ToLower(key)
	best, bestD := "", -1
	for k := range ks.leaves {
		d := distance(key, k)
		if bestD < 0 || d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	// a typo changes a few characters; a word of its own is not a typo of anything
	if bestD < 0 || bestD > max(2, len(key)/3) {
		return ""
	}
	return best
}

// distance is the edit distance (insertions, deletions, substitutions) between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// EnvName is the environment variable that sets key (koanf's dotted form).
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// envKey is the key an environment variable sets, "" for a variable that is not configuration.
func envKey(name string) string {
	if _, other := OtherEnv[name]; other {
		return ""
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, EnvPrefix)), "__", ".")
}

// unknownFileKeys lists the keys of the YAML file that name nothing, each with its nearest key.
func (ks keySet) unknownFileKeys(keys []string) []string {
	var out []string
	for _, key := range keys {
		if ks.known(key, true) {
			continue
		}
		msg := "unknown key " + key
		if near := ks.nearest(key); near != "" {
			msg += ": did you mean " + near + "?"
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// unknownEnv lists the PROVISIONER_ variables of environ that set no key, each with the
// variable of the nearest key.
func (ks keySet) unknownEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		key := envKey(name)
		if key == "" || ks.known(key, false) {
			continue
		}
		msg := name + " is not a known variable"
		if near := ks.nearest(key); near != "" {
			msg += ": did you mean " + EnvName(near) + "?"
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// unknownKeys is the error for the keys of the file and the variables of the environment that
// name no key of the configuration, nil when there are none.
func unknownKeys(fileKeys []string) error {
	ks := knownKeys()
	problems := append(ks.unknownFileKeys(fileKeys), ks.unknownEnv(os.Environ())...)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s (docs/configuration.md lists every key)", ErrInvalid, strings.Join(problems, "; "))
}
