package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A typo in the file is refused with the key named and, when one is close, the key meant.
func TestUnknownFileKeysRefused(t *testing.T) {
	for body, want := range map[string]string{
		"temporal_adress: 127.0.0.1:7233\n":                    "unknown key temporal_adress: did you mean temporal.address?",
		"temporal:\n  adress: x\n  codec_key_file: CODEC\n":    "unknown key temporal.adress: did you mean temporal.address?",
		"helper_timout: 5s\n":                                  "unknown key helper_timout: did you mean helper_timeout?",
		"features: {jwt: false, pkl: true}\n":                  "unknown key features.pkl: did you mean features.pki?",
		"temporal:\n  tls: {ca_fil: x}\n  codec_key_file: C\n": "unknown key temporal.tls.ca_fil: did you mean temporal.tls.ca_file?",
		"frobnicate_everything: true\n":                        "unknown key frobnicate_everything (docs/configuration.md",
	} {
		_, err := Load(writeConfig(t, body))
		require.ErrorIs(t, err, ErrInvalid, body)
		require.ErrorContains(t, err, want, body)
		_, err = LoadForOperator(writeConfig(t, body))
		require.ErrorContains(t, err, want, "the operator CLI reads the same file: "+body)
		// the preflight still reads what it can, to report every other problem too
		_, err = Parse(writeConfig(t, body))
		require.NoError(t, err, body)
	}

	// two typos: both named, in a stable order
	_, err := Load(writeConfig(t, "workerz: 2\nsiet: dc1\n"))
	require.ErrorContains(t, err, "unknown key siet: did you mean site?; unknown key workerz: did you mean workers?")
}

// What the decoder accepts loads: any case, sections written empty, free-form maps with any key.
func TestKnownKeysLoad(t *testing.T) {
	for _, body := range []string{
		"Site: dc1\nWORKERS: 2\n",
		"features: {}\n",
		"features:\n",
		"management:\n  name: provisioner\n  anything:\n    deeper: [1, 2]\n",
		"temporal:\n  tls: {}\n  codec_key_file: CODEC\n",
	} {
		_, err := Load(writeConfig(t, strings.ReplaceAll(body, "CODEC", writeKey(t))))
		require.NoError(t, err, body)
	}
}

// A PROVISIONER_ variable that sets no key is refused, with the variable meant; the variables
// that are not configuration (the codec keys, the codec server's token, the scripts') are not.
func TestUnknownEnvironmentRefused(t *testing.T) {
	file := writeConfig(t, "")
	t.Setenv("PROVISIONER_TEMPORAL_ADDRESS", "temporal.example:7233")
	_, err := Load(file)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "PROVISIONER_TEMPORAL_ADDRESS is not a known variable: did you mean PROVISIONER_TEMPORAL__ADDRESS?")
	_, err = Parse(file)
	require.NoError(t, err)
	require.NoError(t, os.Unsetenv("PROVISIONER_TEMPORAL_ADDRESS"))

	t.Setenv("PROVISIONER_HELPER_TIMEOUT", "5s")
	t.Setenv("PROVISIONER_TEMPORAL__TLS__SERVER_NAME", "temporal.example")
	t.Setenv("PROVISIONER_MANAGEMENT__NAME", "free-form")
	for name := range OtherEnv {
		t.Setenv(name, "00")
	}
	cfg, err := Load(file)
	require.NoError(t, err)
	require.Equal(t, "temporal.example", cfg.Temporal.TLS.ServerName)

	t.Setenv("PROVISIONER_FEATURES", "true") // a section, not a value
	_, err = Load(file)
	require.ErrorContains(t, err, "PROVISIONER_FEATURES is not a known variable")
	require.NoError(t, os.Unsetenv("PROVISIONER_FEATURES"))

	t.Setenv("PROVISIONER_LOGLEVL", "debug")
	_, err = Load(file)
	require.ErrorContains(t, err, "PROVISIONER_LOGLEVL is not a known variable: did you mean PROVISIONER_LOGLEVEL?")
}

// The known keys are the struct's koanf tags: a field added with a tag is known without a list
// to update.
func TestKnownKeysComeFromTheStruct(t *testing.T) {
	ks := knownKeys()
	for _, key := range []string{"workers", "temporal.address", "temporal.tls.key_file", "temporal.api_key", "features.upgrades", "helper_env"} {
		require.True(t, ks.known(key, false), key)
	}
	require.True(t, ks.known("temporal", true), "a section, in a file")
	require.False(t, ks.known("temporal", false), "a section is not a value")
	require.False(t, ks.known("file", false), "koanf:\"-\" fields are no keys")
	require.False(t, ks.known("intervalduration", false))
	require.Equal(t, "PROVISIONER_TEMPORAL__TLS__CA_FILE", EnvName("temporal.tls.ca_file"))
}

// The files and sites written for the Choria Provisioner load: its packaged configuration and
// the example of its documentation use no key this one does not know (fixtures written from
// the keys they use, docs/compatibility.md).
func TestChoriaProvisionerExamplesLoad(t *testing.T) {
	dir := t.TempDir()
	pem := filepath.Join(dir, "jwt-verify.pem")
	require.NoError(t, os.WriteFile(pem, []byte("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"), 0o644))
	signerJWT := filepath.Join(dir, "signer.jwt")
	require.NoError(t, os.WriteFile(signerJWT, []byte("x.y.z"), 0o600))
	for name, body := range map[string]string{
		// its package's /etc/choria-provisioner/choria-provisioner.yaml
		"packaged": "workers: 4\ninterval: 5m\nlogfile: /dev/null\nloglevel: info\ntoken: toomanysecrets\n" +
			"choria_insecure: true\nsite: TEST\nmonitor_port: 8080\njwt_verify_cert: " + pem + "\nfeatures:\n  pki: true\n  jwt: true\n",
		// its documentation's "Common Settings" example
		"documented": "workers: 4\ninterval: 1m\nlogfile: /dev/null\nloglevel: warn\ntoken: s3cret\nsite: testing\n" +
			"broker_provisioning_password: s3cret\njwt_verify_cert: e72cba5268b34627b75c5ceae9449ad16d62f15f862c30d4e0e7d2588e2e6259\n" +
			"jwt_signing_key: SEED\njwt_signing_token: " + signerJWT + "\nfeatures:\n  jwt: true\n  ed25519: true\n",
	} {
		_, err := Load(writeConfig(t, body))
		require.NoError(t, err, name)
	}
}

// Every PROVISIONER_ variable the repository names (scripts, chart, compose, docs, code) is a
// key or one of OtherEnv, so a variable a tool of this project sets never stops the service.
func TestRepositoryVariablesAreKnown(t *testing.T) {
	ks := knownKeys()
	name := regexp.MustCompile(`PROVISIONER_[A-Z0-9_]*[A-Z0-9]`)
	placeholders := map[string]bool{
		"PROVISIONER_KEY":              true, // "PROVISIONER_KEY=VALUE" in a flag's help
		"PROVISIONER_TEMPORAL_ADDRESS": true, // configuration.md's example of a refused variable
	}
	seen := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// the checkout's own files: not git's, nor what builds and the dev stack leave in the
			// ignored directories (.state holds a Docker engine's image layers after make test-compose)
			switch d.Name() {
			case ".git", ".bin", ".state", "bin", "tmp", "dist", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil // tests set refused variables on purpose
		}
		if info, err := d.Info(); err != nil || info.Size() > 1<<20 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllIndex(b, -1) {
			v := string(b[m[0]:m[1]])
			if m[1] < len(b) && b[m[1]] == '_' || placeholders[v] {
				continue // a prefix ("PROVISIONER_TEMPORAL__TLS__*")
			}
			seen++
			key := envKey(v)
			require.True(t, key == "" || ks.known(key, false), "%s (in %s) is neither a configuration key nor in config.OtherEnv", v, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, seen, 20, "the walk found the repository's variables")
}

func writeKey(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "codec.key")
	require.NoError(t, os.WriteFile(f, []byte("00\n"), 0o600))
	return f
}
