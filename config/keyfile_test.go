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

// A key in a directory another user can write to is refused, whatever its own mode: that user
// could replace it. The error names the directory, its mode and the fix; a sticky directory (as
// /tmp, or a Kubernetes Secret's volume) and a directory of the service's own are accepted.
func TestKeyFileDirectories(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "keys")
	require.NoError(t, os.Mkdir(dir, 0o700))
	file := filepath.Join(dir, "codec.key")
	require.NoError(t, os.WriteFile(file, []byte("00\n"), 0o600))
	for mode, want := range map[os.FileMode]string{
		0o700:                 "",
		0o755:                 "",
		0o750:                 "",
		0o770:                 "its directory " + dir + " is writable by group",
		0o757:                 "its directory " + dir + " is writable by others (mode 0757)",
		0o777 | os.ModeSticky: "",
		0o770 | os.ModeSticky: "",
	} {
		require.NoError(t, os.Chmod(dir, mode))
		err := CheckKeyFile(file)
		if want == "" {
			require.NoError(t, err, "%v", mode)
			continue
		}
		var kf *KeyFileError
		require.True(t, errors.As(err, &kf), "%v: %v", mode, err)
		require.Equal(t, dir, kf.File)
		require.Equal(t, file, kf.Key)
		require.ErrorContains(t, err, want)
		require.ErrorContains(t, err, "replace the key")
	}
	require.NoError(t, os.Chmod(dir, 0o700))

	// a directory further up counts as the key's own
	require.NoError(t, os.Chmod(parent, 0o777))
	require.ErrorContains(t, CheckKeyFile(file), "its directory "+parent+" is writable by others (mode 0777): whoever can write there can replace the key: chmod o-w "+parent)
	require.NoError(t, os.Chmod(parent, 0o700))

	// through a symbolic link, the directories of the file it leads to count too
	open := filepath.Join(parent, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o775))
	target := filepath.Join(open, "target.key")
	require.NoError(t, os.WriteFile(target, []byte("00\n"), 0o600))
	link := filepath.Join(dir, "link.key")
	require.NoError(t, os.Symlink(target, link))
	require.ErrorContains(t, CheckKeyFile(link), "its directory "+open+" is writable by group")

	// a directory of another user than root and the service's (only root can make one here)
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(dir, 4242, 0))
		require.ErrorContains(t, CheckKeyFile(file), "its directory "+dir+" is writable by its owner 4242 (mode 0700)")
		require.NoError(t, os.Chown(dir, 0, 0))
		require.NoError(t, CheckKeyFile(file))
	}
}

// Load refuses a key whose directory others can write to, naming the key.
func TestLoadRefusesKeysInOpenDirectories(t *testing.T) {
	file := writeConfig(t, "")
	cfg, err := Parse(file)
	require.NoError(t, err)
	dir := filepath.Dir(cfg.Temporal.CodecKeyFile)
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o777))
	t.Cleanup(func() { _ = os.Chmod(dir, st.Mode().Perm()) })
	_, err = Load(file)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "temporal.codec_key_file: "+cfg.Temporal.CodecKeyFile+": its directory "+dir+" is writable by others (mode 0777)")
}
