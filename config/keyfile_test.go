package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A key readable by others, or writable by its group, is refused with the command that fixes
// it; readable by the owner, or by a group the service is in, it is accepted.
func TestKeyFilePermissions(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "codec.key")
	require.NoError(t, os.WriteFile(file, []byte("00\n"), 0o600))
	for mode, want := range map[os.FileMode]string{
		0o600: "",
		0o400: "",
		0o640: "", // the group is this process's own: the package's choria-provisioner, a pod's fsGroup
		0o440: "", // a Kubernetes Secret's files with defaultMode 0440
		0o644: "is readable by others (mode 0644)",
		0o604: "is readable by others (mode 0604)",
		0o601: "is accessible by others (mode 0601)",
		0o660: "is writable by group",
	} {
		require.NoError(t, os.Chmod(file, mode))
		err := CheckKeyFile(file)
		if want == "" {
			require.NoError(t, err, "%04o", mode)
			continue
		}
		var kf *KeyFileError
		require.True(t, errors.As(err, &kf), "%04o: %v", mode, err)
		require.ErrorContains(t, err, want)
		require.ErrorContains(t, err, "chmod 600 "+file, "the fix, for the file's owner")
	}

	// a group the service is not in may not read it (only root can make such a file here)
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chmod(file, 0o640))
		require.NoError(t, os.Chown(file, 0, 4242))
		err := CheckKeyFile(file)
		require.ErrorContains(t, err, "is readable by group 4242 (mode 0640)")
		require.ErrorContains(t, err, "chmod 600 "+file)
		// not the owner, the group the service's: how the package hands root's file to it
		require.NoError(t, os.Chown(file, 4242, os.Getegid()))
		require.NoError(t, CheckKeyFile(file))
		require.NoError(t, os.Chmod(file, 0o644))
		require.ErrorContains(t, CheckKeyFile(file), "chmod 640 "+file, "the fix keeps the service's group")
	}

	// through a symbolic link (a Kubernetes Secret's files are), the target's mode counts
	target := filepath.Join(dir, "target.key")
	require.NoError(t, os.WriteFile(target, []byte("00\n"), 0o644))
	link := filepath.Join(dir, "link.key")
	require.NoError(t, os.Symlink(target, link))
	require.ErrorContains(t, CheckKeyFile(link), "readable by others")
}

// Load (the service's start, and check) refuses every key file others can read, naming the key.
func TestLoadRefusesKeyFilesOthersRead(t *testing.T) {
	file := writeConfig(t, "features: {ed25519: true}\njwt_signing_key: SEED\njwt_verify_cert: 4c1fbb7e3a79db3f8e7ce0e0a9d8be6bd86b3d0b2fa0a43ccaa3c1c8a96f1fe2\n")
	cfg, err := Parse(file)
	require.NoError(t, err)
	_, err = Load(file)
	require.NoError(t, err)

	for key, path := range map[string]string{"jwt_signing_key": cfg.JWTSigningKey, "temporal.codec_key_file": cfg.Temporal.CodecKeyFile} {
		require.NoError(t, os.Chmod(path, 0o644))
		_, err = Load(file)
		require.ErrorIs(t, err, ErrInvalid, key)
		require.ErrorContains(t, err, key+": "+path+" is readable by others (mode 0644)")
		require.ErrorContains(t, err, "chmod 600 "+path)
		require.NoError(t, os.Chmod(path, 0o600))
	}

	apiKey := filepath.Join(t.TempDir(), "api-key")
	require.NoError(t, os.WriteFile(apiKey, []byte("key\n"), 0o644))
	_, err = ReadAPIKeyFile(apiKey)
	require.ErrorContains(t, err, "chmod 600 "+apiKey)
}
