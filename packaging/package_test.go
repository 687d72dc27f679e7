// Package packaging holds the .deb and .rpm definition (nfpm.yaml, the unit, the maintainer
// scripts) and its test: the packages are built with `make package` and installed for real, by
// dpkg and rpm, into throwaway system roots (testdata/in-root.sh), fresh and over a stand-in for
// the Choria Provisioner's own package.
//
// What the roots do not give: a running systemd. The unit is checked with systemd-analyze verify
// and security, its sandbox is not exercised at run time; the maintainer scripts' systemctl calls
// that need a running manager (daemon-reload, try-restart, stop) are checked against a stub
// systemctl that records them.
package packaging

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	pkgUser = "choria-provisioner"
	unit    = "/usr/lib/systemd/system/choria-provisioner.service"
	yamlCfg = "/etc/choria-provisioner/choria-provisioner.yaml"
	choria  = "/etc/choria-provisioner/choria.cfg"
	logFile = "/var/log/choria-provisioner.log"
	state   = "/var/lib/choria-provisioner"
	enabled = "/etc/systemd/system/multi-user.target.wants/choria-provisioner.service"
)

// the package's files, the same in both formats (the rpm also owns the log, as a ghost)
var packageFiles = []string{
	"/etc/choria-provisioner",
	"/etc/choria-provisioner/choria-provisioner.yaml",
	"/etc/logrotate.d/choria-provisioner",
	"/usr/lib/systemd/system/choria-provisioner.service",
	"/usr/sbin/choria-provisioner",
	"/usr/share/doc/choria-provisioner/configuration.md",
	"/usr/share/doc/choria-provisioner/deployment.md",
	"/usr/share/doc/choria-provisioner/examples/choria.cfg",
	"/var/lib/choria-provisioner",
}

type built struct {
	deb, rpm, oldDeb, oldRPM string
	version, commit          string
}

func requireTools(t *testing.T) {
	t.Helper()
	var missing []string
	for _, c := range []string{"dpkg", "rpm", "unshare", "chroot", "setpriv", "systemd-analyze", "make", "git"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	switch {
	case testing.Short():
		t.Skip("builds and installs the packages")
	case os.Geteuid() != 0 || len(missing) > 0:
		msg := fmt.Sprintf("needs root and %v (scripts/deps.sh installs them)", missing)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

func build(t *testing.T) built {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("make", "-C", "..", "--no-print-directory", "package", "PKG_DIR="+dir).CombinedOutput()
	require.NoError(t, err, "make package:\n%s", out)
	b := built{}
	b.deb = glob(t, dir, "choria-provisioner_*.deb")
	b.rpm = glob(t, dir, "choria-provisioner-*.rpm")
	v, err := exec.Command("../scripts/version.sh").Output()
	require.NoError(t, err)
	b.version = strings.TrimSpace(string(v))
	c, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	require.NoError(t, err)
	b.commit = strings.TrimSpace(string(c))

	// the stand-in for the Choria Provisioner's package
	old := filepath.Join(dir, "old")
	require.NoError(t, os.MkdirAll(old, 0o755))
	for _, p := range []string{"deb", "rpm"} {
		nfpm, err := filepath.Abs("../.bin/nfpm")
		require.NoError(t, err)
		cmd := exec.Command(nfpm, "package", "--config", "packaging/testdata/old-provisioner/nfpm.yaml", "--packager", p, "--target", old+"/")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "PKG_ARCH="+goarch(t))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "nfpm %s:\n%s", p, out)
	}
	b.oldDeb = glob(t, old, "*.deb")
	b.oldRPM = glob(t, old, "*.rpm")
	return b
}

func goarch(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

func glob(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	require.NoError(t, err)
	require.Len(t, m, 1, "%s in %s", pattern, dir)
	return m[0]
}

// sysroot is a throwaway system root: DIR/root, whose /usr is an overlay of the host's.
type sysroot struct {
	t    *testing.T
	dir  string
	root string
}

func newRoot(t *testing.T, b built) *sysroot {
	t.Helper()
	// not t.TempDir(): its name carries the test's, and a comma would end overlayfs's option
	dir, err := os.MkdirTemp("", "pkgroot-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &sysroot{t: t, dir: dir, root: filepath.Join(dir, "root")}
	for _, d := range []string{"upper", "work", "root/usr", "root/etc", "root/dev", "root/proc", "root/run", "root/tmp",
		"root/var/lib/dpkg/info", "root/var/lib/dpkg/updates", "root/var/log", "root/var/tmp", "root/pkgs"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.Chmod(filepath.Join(r.root, "tmp"), 0o1777))
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} { // merged /usr, as Debian 12 and EL 9 are
		require.NoError(t, os.Symlink("usr/"+l, filepath.Join(r.root, l)))
	}
	for _, f := range []string{"passwd", "group", "shadow", "gshadow"} {
		// the host's accounts less any choria-provisioner one, so the package must create it
		b, err := os.ReadFile("/etc/" + f)
		require.NoError(t, err)
		var keep []string
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if !strings.HasPrefix(l, pkgUser+":") {
				keep = append(keep, l)
			}
		}
		require.NoError(t, os.WriteFile(filepath.Join(r.root, "etc", f), []byte(strings.Join(keep, "\n")+"\n"), 0o600))
	}
	require.NoError(t, os.Chmod(filepath.Join(r.root, "etc/passwd"), 0o644))
	require.NoError(t, os.Chmod(filepath.Join(r.root, "etc/group"), 0o644))
	for _, f := range []string{"login.defs", "nsswitch.conf", "ld.so.cache", "ld.so.conf"} {
		if b, err := os.ReadFile("/etc/" + f); err == nil {
			require.NoError(t, os.WriteFile(filepath.Join(r.root, "etc", f), b, 0o644))
		}
	}
	for _, f := range []string{"var/lib/dpkg/status", "var/lib/dpkg/available"} {
		require.NoError(t, os.WriteFile(filepath.Join(r.root, f), nil, 0o644))
	}
	for _, p := range []string{b.deb, b.rpm, b.oldDeb, b.oldRPM} {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(r.root, "pkgs", filepath.Base(p)), data, 0o644))
	}
	return r
}

// run runs a command inside the root (as root) with a service manager's environment.
func (r *sysroot) run(args ...string) (string, int) {
	r.t.Helper()
	cmd := exec.Command("testdata/in-root.sh", append([]string{r.dir, "/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}, args...)...)
	out, err := cmd.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); ok {
		return string(out), exit.ExitCode()
	}
	require.NoError(r.t, err, "%v: %s", args, out)
	return string(out), 0
}

func (r *sysroot) must(args ...string) string {
	r.t.Helper()
	out, code := r.run(args...)
	require.Equal(r.t, 0, code, "%v:\n%s", args, out)
	return out
}

// path is where a file of the root is on the host; /usr files are in the overlay's upper layer.
func (r *sysroot) path(p string) string {
	if strings.HasPrefix(p, "/usr/") {
		return filepath.Join(r.dir, "upper", strings.TrimPrefix(p, "/usr/"))
	}
	return filepath.Join(r.root, p)
}

func (r *sysroot) write(p, body string, mode os.FileMode) {
	r.t.Helper()
	require.NoError(r.t, os.WriteFile(r.path(p), []byte(body), mode))
	require.NoError(r.t, os.Chmod(r.path(p), mode))
}

func (r *sysroot) sum(p string) string {
	r.t.Helper()
	b, err := os.ReadFile(r.path(p))
	require.NoError(r.t, err)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ids reads the root's passwd or group file: name -> id, and for passwd the whole entry.
func (r *sysroot) ids(file string) (map[string]int, map[int]string, map[string][]string) {
	r.t.Helper()
	f, err := os.Open(filepath.Join(r.root, "etc", file))
	require.NoError(r.t, err)
	defer f.Close()
	byName, byID, entry := map[string]int{}, map[int]string{}, map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		id, _ := strconv.Atoi(fields[2])
		byName[fields[0]], byID[id], entry[fields[0]] = id, fields[0], fields
	}
	return byName, byID, entry
}

// owner is "user:group mode" of a file in the root, names from the root's own accounts.
func (r *sysroot) owner(p string) string {
	r.t.Helper()
	st, err := os.Lstat(r.path(p))
	require.NoError(r.t, err, p)
	_, users, _ := r.ids("passwd")
	_, groups, _ := r.ids("group")
	sys := st.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%s:%s %04o", users[int(sys.Uid)], groups[int(sys.Gid)], st.Mode().Perm())
}

func (r *sysroot) exists(p string) bool {
	_, err := os.Lstat(r.path(p))
	return err == nil
}

// stubSystemd makes the root look like a booted systemd host to the maintainer scripts: a
// systemctl that records its arguments, answers `show --property=User` with user and
// `is-active` with active.
func (r *sysroot) stubSystemd(user string, active bool) {
	r.t.Helper()
	require.NoError(r.t, os.MkdirAll(r.path("/run/systemd/system"), 0o755))
	require.NoError(r.t, os.MkdirAll(r.path("/usr/sbin"), 0o755))
	code := 3
	if active {
		code = 0
	}
	// in /usr/sbin: first on both dpkg's PATH and rpm's scriptlet PATH (/sbin:/bin:/usr/sbin:/usr/bin),
	// ahead of the real /usr/bin/systemctl
	r.write("/usr/sbin/systemctl", fmt.Sprintf(`#!/bin/sh
echo "$*" >>/run/systemctl.calls
case "$*" in
  *show*User*) echo %q ;;
  *is-active*) exit %d ;;
esac
exit 0
`, user, code), 0o755)
	_ = os.Remove(r.path("/run/systemctl.calls"))
}

func (r *sysroot) systemctlCalls() string {
	b, _ := os.ReadFile(r.path("/run/systemctl.calls"))
	return string(b)
}

func (r *sysroot) unstubSystemd() {
	require.NoError(r.t, os.RemoveAll(r.path("/run/systemd")))
	require.NoError(r.t, os.Remove(r.path("/usr/sbin/systemctl")))
}

func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// execStart is the installed unit's command line.
func (r *sysroot) execStart() []string {
	r.t.Helper()
	b, err := os.ReadFile(r.path(unit))
	require.NoError(r.t, err)
	m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindStringSubmatch(string(b))
	require.NotNil(r.t, m)
	return strings.Fields(m[1])
}

func TestPackages(t *testing.T) {
	requireTools(t)
	start := time.Now()
	b := build(t)
	t.Logf("built %s and %s (version %s) in %v", filepath.Base(b.deb), filepath.Base(b.rpm), b.version, time.Since(start).Round(time.Second))
	pkgVersion := strings.Replace(b.version, "-", "~", 1) // nfpm: a semver pre-release sorts before the release

	t.Run("rpm metadata", func(t *testing.T) {
		out, err := exec.Command("rpm", "-qp", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\n", b.rpm).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, fmt.Sprintf("choria-provisioner %s-1\n", pkgVersion), string(out))
		out, err = exec.Command("rpm", "-qlp", b.rpm).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.ElementsMatch(t, append(append([]string{}, packageFiles...), logFile), strings.Fields(string(out)))
		out, err = exec.Command("rpm", "-qpc", b.rpm).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.ElementsMatch(t, []string{yamlCfg, "/etc/logrotate.d/choria-provisioner"}, strings.Fields(string(out)))
		out, err = exec.Command("rpm", "-qp", "--scripts", b.rpm).CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, s := range []string{"preinstall scriptlet", "postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet",
			"useradd --system --gid \"$user\" --home-dir /var/lib/choria-provisioner", `systemctl try-restart "$unit"`, `systemctl --no-reload disable "$unit"`} {
			require.Contains(t, string(out), s)
		}
		out, err = exec.Command("rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILEFLAGS:fflags} %{FILENAMES}\n]", b.rpm).CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, l := range []string{
			"-rw-r----- root:choria-provisioner cn /etc/choria-provisioner/choria-provisioner.yaml",
			"-rwxr-xr-x root:root  /usr/sbin/choria-provisioner",
			"drwxr-x--- choria-provisioner:choria-provisioner  /var/lib/choria-provisioner",
			"-rw-r----- choria-provisioner:choria-provisioner g /var/log/choria-provisioner.log",
		} {
			require.Contains(t, string(out), l)
		}
	})

	t.Run("deb install, run, reinstall, remove", func(t *testing.T) {
		r := newRoot(t, b)
		out := r.must("dpkg", "--force-depends", "-i", "/pkgs/"+filepath.Base(b.deb))
		require.Contains(t, out, "then 'systemctl enable --now choria-provisioner'")

		// the files and who owns them
		list := r.must("dpkg-query", "-L", "choria-provisioner")
		for _, f := range packageFiles {
			require.Contains(t, strings.Fields(list), f)
		}
		require.NotContains(t, list, "choria-provisioner-dev", "the dev tools are not packaged")
		require.Equal(t, pkgVersion+"-1", r.must("dpkg-query", "-W", "-f=${Version}", "choria-provisioner"))
		conffiles := r.must("dpkg-query", "-W", "-f=${Conffiles}", "choria-provisioner")
		require.Contains(t, conffiles, yamlCfg)
		require.Contains(t, conffiles, "/etc/logrotate.d/choria-provisioner")
		users, _, entries := r.ids("passwd")
		groups, _, _ := r.ids("group")
		require.Contains(t, users, pkgUser, "the service user is created on install")
		require.Contains(t, groups, pkgUser)
		require.Less(t, users[pkgUser], 1000, "a system user")
		require.Equal(t, state, entries[pkgUser][5])
		require.Equal(t, "/usr/sbin/nologin", entries[pkgUser][6])
		for p, want := range map[string]string{
			"/usr/sbin/choria-provisioner":        "root:root 0755",
			unit:                                  "root:root 0644",
			"/etc/logrotate.d/choria-provisioner": "root:root 0644",
			yamlCfg:                               "root:choria-provisioner 0640",
			"/etc/choria-provisioner":             "root:root 0755",
			state:                                 "choria-provisioner:choria-provisioner 0750",
			logFile:                               "choria-provisioner:choria-provisioner 0640",
		} {
			require.Equal(t, want, r.owner(p), p)
		}
		require.True(t, r.exists(enabled), "systemd presets (Debian's: enable) decide on first install")

		// the unit: systemd's own verdict, and its exposure score
		require.Equal(t, "", r.must("systemd-analyze", "verify", unit))
		sec := r.must("systemd-analyze", "security", "--offline=true", "choria-provisioner.service")
		m := regexp.MustCompile(`Overall exposure level for choria-provisioner.service: ([0-9.]+)`).FindStringSubmatch(sec)
		require.NotNil(t, m, sec)
		score, _ := strconv.ParseFloat(m[1], 64)
		t.Logf("systemd-analyze security: exposure %.1f (0 best, 10 worst)", score)
		require.Less(t, score, 2.5, sec)

		// --version, as the service user
		asUser := []string{"setpriv", "--reuid=" + pkgUser, "--regid=" + pkgUser, "--init-groups"}
		v := r.must(append(asUser, "/usr/sbin/choria-provisioner", "--version")...)
		require.Regexp(t, "^"+regexp.QuoteMeta(b.version)+` \(commit `+regexp.QuoteMeta(b.commit), v)

		// the preflight on the example configuration as installed: it names what the site must add
		out, code := r.run("/usr/sbin/choria-provisioner", "check", "--timeout", "2s")
		require.Equal(t, 1, code, out)
		require.Contains(t, out, "checking as choria-provisioner")
		require.Regexp(t, `FAIL\s+helper\s+.*/etc/choria-provisioner/helper`, out)
		require.Regexp(t, `FAIL\s+file\s+temporal.codec_key_file /etc/choria-provisioner/codec.key: does not exist`, out)
		require.Regexp(t, `FAIL\s+file\s+--choria-config /etc/choria-provisioner/choria.cfg: does not exist`, out)
		require.Regexp(t, `ok\s+file\s+logfile /var/log/choria-provisioner.log writable by choria-provisioner`, out)

		// what a site supplies; the codec key still root's alone, and the helper's script in /root
		temporal := closedPort(t)
		r.write("/etc/choria-provisioner/helper", "#!/bin/sh\necho '{\"defer\": true, \"msg\": \"not yet\"}'\n", 0o750)
		r.write("/etc/choria-provisioner/codec.key", strings.Repeat("ab", 32)+"\n", 0o600)
		example, err := os.ReadFile(r.path("/usr/share/doc/choria-provisioner/examples/choria.cfg"))
		require.NoError(t, err)
		broker := regexp.MustCompile(`(?m)^plugin.choria.middleware_hosts = .*$`)
		r.write(choria, broker.ReplaceAllString(string(example), fmt.Sprintf("plugin.choria.middleware_hosts = nats://127.0.0.1:%d", closedPort(t))), 0o640)
		r.write("/etc/choria-provisioner/provisioner.jwt", "a site's token\n", 0o640)
		r.write("/etc/choria-provisioner/provisioner.seed", "a site's seed\n", 0o640)
		r.must("chgrp", pkgUser, "/etc/choria-provisioner/helper", choria, "/etc/choria-provisioner/provisioner.jwt", "/etc/choria-provisioner/provisioner.seed")
		env := []string{"env", fmt.Sprintf("PROVISIONER_TEMPORAL__ADDRESS=127.0.0.1:%d", temporal)}
		out, code = r.run(append(env, "/usr/sbin/choria-provisioner", "check", "--timeout", "2s")...)
		require.Equal(t, 1, code, out)
		require.Regexp(t, `FAIL\s+file\s+temporal.codec_key_file /etc/choria-provisioner/codec.key: permission denied for choria-provisioner -> chgrp choria-provisioner /etc/choria-provisioner/codec.key && chmod g\+r`, out)
		require.Regexp(t, `ok\s+helper\s+"/etc/choria-provisioner/helper" runs /etc/choria-provisioner/helper with /bin/sh \(not run\)`, out)
		// a helper kept in a home directory, readable by everyone, is still out of the service's sight
		require.NoError(t, os.MkdirAll(r.path("/home/ops"), 0o755))
		r.write("/home/ops/helper.sh", "#!/bin/sh\n", 0o755)
		out, _ = r.run(append(env, "PROVISIONER_HELPER=/home/ops/helper.sh", "/usr/sbin/choria-provisioner", "check", "--timeout", "2s")...)
		require.Regexp(t, `FAIL\s+helper\s+/home/ops/helper.sh: the unit's ProtectHome=yes hides /home from the service`, out)

		r.must("chgrp", pkgUser, "/etc/choria-provisioner/codec.key")
		r.must("chmod", "g+r", "/etc/choria-provisioner/codec.key")
		out, code = r.run(append(env, "/usr/sbin/choria-provisioner", "check", "--timeout", "2s")...)
		require.Equal(t, 1, code, out)
		require.NotRegexp(t, `FAIL\s+(config|file|helper|codec key)\s`, out, "every local check passes")
		require.Regexp(t, `FAIL\s+temporal\s+connecting to Temporal at 127.0.0.1:`+strconv.Itoa(temporal), out)
		require.Regexp(t, `FAIL\s+broker\s`, out)

		// the unit's own command line, as the service user, on the example configuration: it
		// starts and stops at the missing Temporal
		cmdline := append(append(append([]string{}, asUser...), env...), r.execStart()...)
		out, code = r.run(cmdline...)
		require.NotEqual(t, 0, code, out)
		require.Contains(t, out, fmt.Sprintf("connecting to Temporal at 127.0.0.1:%d", temporal))
		logged, err := os.ReadFile(r.path(logFile))
		require.NoError(t, err)
		require.Contains(t, string(logged), "choria provisioner starting", "the service user writes the log")

		// reinstall (an upgrade to dpkg) on a host where systemd runs this package's unit: restarted
		r.stubSystemd(pkgUser, true)
		out = r.must("dpkg", "--force-depends", "-i", "/pkgs/"+filepath.Base(b.deb))
		require.Contains(t, r.systemctlCalls(), "try-restart choria-provisioner.service")
		require.Contains(t, r.systemctlCalls(), "daemon-reload")
		require.NotContains(t, r.systemctlCalls(), "preset", "an upgrade leaves enabling alone")
		// ... and where the unit systemd runs is the Choria Provisioner's (root): left running
		r.stubSystemd("root", true)
		out = r.must("dpkg", "--force-depends", "-i", "/pkgs/"+filepath.Base(b.deb))
		require.NotContains(t, r.systemctlCalls(), "try-restart")
		require.Contains(t, out, "the running service is the Choria Provisioner (it runs as 'root') and was left running")

		// removal: stopped and disabled; configuration, state, log and user stay
		r.write(state+"/site-note", "kept\n", 0o640)
		r.must("dpkg", "-r", "choria-provisioner")
		require.Contains(t, r.systemctlCalls(), "stop choria-provisioner.service")
		require.Contains(t, r.systemctlCalls(), "disable choria-provisioner.service")
		r.unstubSystemd()
		for _, p := range []string{yamlCfg, choria, "/etc/logrotate.d/choria-provisioner", "/etc/choria-provisioner/codec.key", state + "/site-note", logFile} {
			require.True(t, r.exists(p), "%s stays after removal", p)
		}
		for _, p := range []string{"/usr/sbin/choria-provisioner", unit} {
			require.False(t, r.exists(p), "%s goes with the package", p)
		}
		users, _, _ = r.ids("passwd")
		require.Contains(t, users, pkgUser)
	})

	t.Run("deb over the Choria Provisioner's package", func(t *testing.T) {
		r := newRoot(t, b)
		r.must("dpkg", "--force-depends", "-i", "/pkgs/"+filepath.Base(b.oldDeb))
		require.Equal(t, "0.16.0\n", r.must("/usr/sbin/choria-provisioner"))
		siteYAML := "---\nhelper: /etc/choria-provisioner/helper\ntoken: s3cret\nsite: dc1\ntemporal:\n  address: temporal.example.net:7233\n"
		r.write(yamlCfg, siteYAML, 0o640)
		r.write(choria, "plugin.choria.middleware_hosts = nats://broker.example.net:4222\n", 0o640)
		r.must("systemctl", "enable", "choria-provisioner.service") // offline, in the root: the site's enablement
		require.True(t, r.exists(enabled))
		yamlSum, choriaSum := r.sum(yamlCfg), r.sum(choria)

		// as Puppet's apt provider installs: keep the site's version of a changed config file
		r.must("dpkg", "--force-depends", "--force-confdef", "--force-confold", "-i", "/pkgs/"+filepath.Base(b.deb))
		require.Equal(t, yamlSum, r.sum(yamlCfg), "the site's YAML is untouched")
		require.Equal(t, choriaSum, r.sum(choria), "choria.cfg is untouched")
		require.True(t, r.exists(enabled), "the service stays enabled across the switch")
		require.Contains(t, r.must("/usr/sbin/choria-provisioner", "--version"), b.version)
		require.Equal(t, "choria-provisioner:choria-provisioner 0644", r.owner(logFile), "the old log, now the service user's")
		require.Equal(t, "choria-provisioner:choria-provisioner 0750", r.owner(state))
		// the site's files are still root's alone: check says so, and how to fix it
		out, code := r.run("/usr/sbin/choria-provisioner", "check", "--timeout", "2s")
		require.Equal(t, 1, code, out)
		require.Regexp(t, `FAIL\s+config\s+/etc/choria-provisioner/choria-provisioner.yaml: .*permission denied.* -> chgrp choria-provisioner /etc/choria-provisioner/choria-provisioner.yaml && chmod g\+r`, out)

		// rolling back: the old package again, the site's files as they were, still enabled
		out = r.must("dpkg", "--force-depends", "--force-confdef", "--force-confold", "-i", "/pkgs/"+filepath.Base(b.oldDeb))
		require.Contains(t, out, "downgrading")
		require.Equal(t, "0.16.0\n", r.must("/usr/sbin/choria-provisioner"))
		require.Equal(t, yamlSum, r.sum(yamlCfg))
		require.Equal(t, choriaSum, r.sum(choria))
		require.True(t, r.exists(enabled))
		require.True(t, r.exists(logFile))
	})

	t.Run("rpm over the Choria Provisioner's package, upgrade, erase", func(t *testing.T) {
		r := newRoot(t, b)
		r.must("rpm", "--initdb")
		r.must("rpm", "-i", "--nodeps", "/pkgs/"+filepath.Base(b.oldRPM))
		siteYAML := "---\nhelper: /etc/choria-provisioner/helper\ntoken: s3cret\nsite: dc1\n"
		r.write(yamlCfg, siteYAML, 0o640)
		r.write(choria, "plugin.choria.middleware_hosts = nats://broker.example.net:4222\n", 0o640)
		r.write(logFile, "a line the old provisioner wrote\n", 0o644)
		r.must("systemctl", "enable", "choria-provisioner.service")
		yamlSum, choriaSum, logSum := r.sum(yamlCfg), r.sum(choria), r.sum(logFile)

		out := r.must("rpm", "-U", "--nodeps", "/pkgs/"+filepath.Base(b.rpm))
		t.Logf("rpm -U over the old package:\n%s", out)
		require.Equal(t, pkgVersion+"-1", r.must("rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", "choria-provisioner"))
		require.Equal(t, yamlSum, r.sum(yamlCfg), "the site's YAML is untouched")
		require.True(t, r.exists(yamlCfg+".rpmnew"), "the new example is set beside it")
		require.Equal(t, choriaSum, r.sum(choria))
		require.Equal(t, logSum, r.sum(logFile), "the old log is kept")
		require.Equal(t, "choria-provisioner:choria-provisioner", strings.Fields(r.owner(logFile))[0])
		require.Equal(t, "choria-provisioner:choria-provisioner 0750", r.owner(state))
		require.True(t, r.exists(enabled), "the service stays enabled across the switch")
		require.Contains(t, r.must("/usr/sbin/choria-provisioner", "--version"), b.version)
		users, _, _ := r.ids("passwd")
		require.Contains(t, users, pkgUser)

		// an upgrade of this package with its unit running: restarted; then erase
		r.stubSystemd(pkgUser, true)
		r.must("rpm", "-U", "--nodeps", "--replacepkgs", "/pkgs/"+filepath.Base(b.rpm))
		require.Contains(t, r.systemctlCalls(), "try-restart choria-provisioner.service")
		require.NotContains(t, r.systemctlCalls(), "stop", "an upgrade's old-package scriptlets do not stop it")
		// rolling back: the old package restarts its own unit itself; the site's files as they were
		r.stubSystemd(pkgUser, true)
		r.must("rpm", "-U", "--nodeps", "--oldpackage", "/pkgs/"+filepath.Base(b.oldRPM))
		require.Equal(t, "0.16.0\n", r.must("/usr/sbin/choria-provisioner"))
		require.Contains(t, r.systemctlCalls(), "try-restart choria-provisioner")
		require.NotContains(t, r.systemctlCalls(), "disable", "a downgrade leaves the service enabled")
		require.Equal(t, yamlSum, r.sum(yamlCfg))
		require.Equal(t, choriaSum, r.sum(choria))
		require.True(t, r.exists(enabled))
		require.True(t, r.exists(logFile))
		// and forward again, then erase
		r.must("rpm", "-U", "--nodeps", "/pkgs/"+filepath.Base(b.rpm))
		require.Equal(t, yamlSum, r.sum(yamlCfg))
		r.stubSystemd(pkgUser, true)
		r.write(state+"/site-note", "kept\n", 0o640)
		r.must("rpm", "-e", "--nodeps", "choria-provisioner")
		require.Contains(t, r.systemctlCalls(), "stop choria-provisioner.service")
		require.Contains(t, r.systemctlCalls(), "disable choria-provisioner.service")
		r.unstubSystemd()
		// rpm keeps a changed config file as .rpmsave on erase; unchanged ones (logrotate) go
		saved, err := os.ReadFile(r.path(yamlCfg + ".rpmsave"))
		require.NoError(t, err)
		require.Equal(t, siteYAML, string(saved))
		for _, p := range []string{choria, state + "/site-note", logFile} {
			require.True(t, r.exists(p), "%s stays after removal", p)
		}
		require.False(t, r.exists("/usr/sbin/choria-provisioner"))
	})
}
