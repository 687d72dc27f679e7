package config

import (
	"os"
	"os/user"
	"strconv"
	"strings"
)

// HelperCredential is the user the helper runs as (helper_user): its uid and primary group, and
// no supplementary group, so it reads what that user may read and none of the provisioner's
// files (its codec, secrets and signing keys, mode 0600 of the provisioner's user).
type HelperCredential struct {
	User string
	UID  uint32
	GID  uint32
}

// validateHelperEnv refuses names that are not variable names, and the provisioner's own.
func (c *Config) validateHelperEnv() error {
	for _, name := range c.HelperEnv {
		if !envName.MatchString(name) {
			return invalid("helper_env", "%q is not an environment variable name", name)
		}
		if strings.HasPrefix(strings.ToUpper(name), EnvPrefix) {
			return invalid("helper_env", "%s is the provisioner's own (%s*: its keys and settings), never the helper's", name, EnvPrefix)
		}
	}
	return nil
}

// validateHelperUser resolves helper_user. It refuses root (a helper as root reads every key)
// and the provisioner's own user (it would read the keys helper_user is set to keep from it).
// Whether this process may switch to it (root, or CAP_SETUID and CAP_SETGID) shows on the
// first helper run, as the helper step's error.
func (c *Config) validateHelperUser() error {
	if c.HelperUser == "" {
		return nil
	}
	u, err := user.Lookup(c.HelperUser)
	if err != nil {
		if _, numeric := strconv.ParseUint(c.HelperUser, 10, 32); numeric == nil {
			u, err = user.LookupId(c.HelperUser)
		}
	}
	if err != nil {
		return invalid("helper_user", "%q: %v", c.HelperUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return invalid("helper_user", "%q: uid %q: %v", c.HelperUser, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return invalid("helper_user", "%q: gid %q: %v", c.HelperUser, u.Gid, err)
	}
	switch {
	case uid == 0:
		return invalid("helper_user", "%q is root: the helper would read every key of the provisioner", c.HelperUser)
	case int(uid) == os.Getuid():
		return invalid("helper_user", "%q is the provisioner's own user: the helper would read its keys; name another user, or leave helper_user empty", c.HelperUser)
	}
	c.HelperCredential = &HelperCredential{User: u.Username, UID: uint32(uid), GID: uint32(gid)}
	return nil
}
