package config

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"
)

// KeyFileError says that a file holding a secret (a key, a seed, a token) can be read or
// changed by users other than the service's, and how to fix it.
type KeyFileError struct {
	File string
	Mode fs.FileMode
	Who  string // "others", or "group NAME"
	What string // "readable", "writable"
	Fix  string // a command that fixes it
}

func (e *KeyFileError) Error() string {
	return fmt.Sprintf("%s is %s by %s (mode %04o): a key must be readable by the service alone: %s", e.File, e.What, e.Who, e.Mode.Perm(), e.Fix)
}

// CheckKeyFile refuses a file holding a secret that users other than the service's could read
// (as OpenSSH refuses a private key readable by group or others). A file is accepted when no
// other user has any access to it, with one exception: a group the service's process is in
// may read it. That is how the package and the chart hand root's files to the service (group
// choria-provisioner, mode 0640; a Kubernetes Secret's files of group fsGroup, mode 0440), and
// the members of such a group are the ones the site chose to let in.
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
		return nil
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
