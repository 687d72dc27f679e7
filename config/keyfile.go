package config

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// KeyFileError says that a file holding a secret (a key, a seed, a token) can be read or
// changed by users other than the service's, and how to fix it. When Key is set, File is a
// directory above the key in which another user can replace it.
type KeyFileError struct {
	File string
	Key  string // the key file, when File is a directory above it
	Mode fs.FileMode
	Who  string // "others", "group NAME", or "its owner NAME"
	What string // "readable", "writable"
	Fix  string // a command that fixes it
}

func (e *KeyFileError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("%s: its directory %s is %s by %s (mode %04o): whoever can write there can replace the key: %s",
			e.Key, e.File, e.What, e.Who, e.Mode.Perm(), e.Fix)
	}
	return fmt.Sprintf("%s is %s by %s (mode %04o): a key must be readable by the service alone: %s", e.File, e.What, e.Who, e.Mode.Perm(), e.Fix)
}

// CheckKeyFile refuses a file holding a secret that users other than the service's could read
// (as OpenSSH refuses a private key readable by group or others). A file is accepted when no
// other user has any access to it, with one exception: a group the service's process is in
// may read it. That is how the package and the chart hand root's files to the service (group
// choria-provisioner, mode 0640; a Kubernetes Secret's files of group fsGroup, mode 0440), and
// the members of such a group are the ones the site chose to let in.
//
// The directories above it count too (keyDirs): a key in a directory another user can write to
// can be replaced by that user, whatever its own mode.
func CheckKeyFile(file string) error {
	st, err := os.Stat(file) // the target: a Kubernetes Secret's files are symbolic links
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := st.Mode()
	mine := int(sys.Uid) == os.Geteuid()
	ourGroup := inGroup(sys.Gid)
	e := &KeyFileError{File: file, Mode: mode}
	switch {
	case mode&0o007 != 0:
		e.Who = "others"
		e.What = "readable"
		if mode&0o004 == 0 {
			e.What = "accessible"
		}
	case mode&0o020 != 0:
		e.Who, e.What = "group "+groupName(sys.Gid), "writable"
	case mode&0o040 != 0 && !ourGroup:
		e.Who, e.What = "group "+groupName(sys.Gid), "readable"
	default:
		return checkKeyDirs(file)
	}
	switch {
	case mine:
		e.Fix = "chmod 600 " + file
	case ourGroup:
		e.Fix = "chmod 640 " + file
	default:
		e.Fix = fmt.Sprintf("chgrp %s %s && chmod 640 %s (or chmod 600 %s and make it the service user's)", groupName(uint32(os.Getegid())), file, file, file)
	}
	return e
}

// checkKeyDirs refuses a key file when a directory above it, up to /, lets another user
// replace it: one writable by group or others without the sticky bit (with it, as in /tmp or a
// Kubernetes Secret's volume, only a file's owner may remove or rename it), or one owned by a
// user other than root and the service's (its owner can make it writable at will). Both the
// path as given and the one its symbolic links lead to are walked: a Secret's files are links.
func checkKeyDirs(file string) error {
	paths := []string{file}
	if target, err := filepath.EvalSymlinks(file); err == nil && target != file {
		paths = append(paths, target)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("key file %s: %w", file, err)
		}
		for dir := filepath.Dir(abs); !seen[dir]; dir = filepath.Dir(dir) {
			seen[dir] = true
			if err := checkKeyDir(file, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkKeyDir(file, dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("key file %s: its directory: %w", file, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := st.Mode()
	e := &KeyFileError{File: dir, Key: file, Mode: mode, What: "writable"}
	switch {
	case sys.Uid != 0 && int(sys.Uid) != os.Geteuid():
		e.Who = "its owner " + userName(sys.Uid)
		e.Fix = fmt.Sprintf("chown root %s && chmod go-w %s, or keep the key in a directory of root's or the service's user", dir, dir)
	case mode&fs.ModeSticky != 0:
		return nil
	case mode&0o002 != 0:
		e.Who, e.Fix = "others", "chmod o-w "+dir
	case mode&0o020 != 0:
		e.Who, e.Fix = "group "+groupName(sys.Gid), "chmod g-w "+dir
	default:
		return nil
	}
	return e
}

func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username
	}
	return id
}

// inGroup says whether this process is in group gid (its own or a supplementary one).
func inGroup(gid uint32) bool {
	if int(gid) == os.Getegid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, int(gid))
}

func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name
	}
	return id
}
