package preflight

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kballard/go-shellquote"
)

// UnitName is the packaged unit.
const UnitName = "choria-provisioner.service"

// unitDirs are where systemd looks for a system unit and its drop-ins, highest priority first.
var unitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// LoadSandbox reads the installed unit named name under root ("" or "/" for this host) and its
// drop-ins, as systemd would combine them. It returns nil, nil when the unit is not installed.
// Only the settings that decide what the service can see and write are read.
func LoadSandbox(root, name string) (*Sandbox, error) {
	var unit string
	for _, d := range unitDirs {
		f := filepath.Join(root, d, name)
		if _, err := os.Stat(f); err == nil {
			unit = f
			break
		}
	}
	if unit == "" {
		return nil, nil
	}
	// drop-ins of the same file name: the one in the highest-priority directory wins; all apply
	// in file name order
	dropins := map[string]string{}
	for i := len(unitDirs) - 1; i >= 0; i-- {
		matches, _ := filepath.Glob(filepath.Join(root, unitDirs[i], name+".d", "*.conf"))
		for _, m := range matches {
			dropins[filepath.Base(m)] = m
		}
	}
	names := make([]string, 0, len(dropins))
	for n := range dropins {
		names = append(names, n)
	}
	sort.Strings(names)
	files := []string{unit}
	for _, n := range names {
		files = append(files, dropins[n])
	}

	s := &Sandbox{Unit: unit}
	for _, f := range files {
		if err := s.read(f); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Sandbox) read(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if section != "[Service]" {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch key {
		case "User":
			s.User = value
		case "ExecStart":
			if value == "" {
				s.Config, s.ChoriaConfig = "", ""
				continue
			}
			s.Config, s.ChoriaConfig = execFlags(value)
		case "ProtectHome":
			s.ProtectHome = normalBool(value, "yes")
		case "PrivateTmp":
			s.PrivateTmp = normalBool(value, "yes") == "yes"
		case "ProtectSystem":
			s.StrictSystem = value == "strict"
		case "ReadWritePaths":
			if value == "" {
				s.Writable = nil
				continue
			}
			for _, p := range strings.Fields(value) {
				s.Writable = append(s.Writable, strings.TrimLeft(p, "-+"))
			}
		case "StateDirectory", "LogsDirectory", "CacheDirectory", "RuntimeDirectory":
			base := map[string]string{"StateDirectory": "/var/lib", "LogsDirectory": "/var/log", "CacheDirectory": "/var/cache", "RuntimeDirectory": "/run"}[key]
			for _, p := range strings.Fields(value) {
				p, _, _ = strings.Cut(p, ":")
				s.Writable = append(s.Writable, filepath.Join(base, p))
			}
		}
	}
	return sc.Err()
}

// normalBool maps systemd's boolean spellings to "yes" and "", keeping other values (read-only).
func normalBool(v, yes string) string {
	switch strings.ToLower(v) {
	case "1", "yes", "true", "on":
		return yes
	case "0", "no", "false", "off", "":
		return ""
	}
	return strings.ToLower(v)
}

// execFlags finds run's --config and --choria-config in an ExecStart command line.
func execFlags(cmdline string) (cfg, choria string) {
	words, err := shellquote.Split(strings.TrimLeft(cmdline, "@-:+!"))
	if err != nil {
		return "", ""
	}
	for i := 0; i < len(words); i++ {
		for _, f := range []struct {
			name string
			dst  *string
		}{{"--config", &cfg}, {"--choria-config", &choria}} {
			switch {
			case words[i] == f.name && i+1 < len(words):
				*f.dst = words[i+1]
			case strings.HasPrefix(words[i], f.name+"="):
				*f.dst = strings.TrimPrefix(words[i], f.name+"=")
			}
		}
	}
	return cfg, choria
}

// hidden says why the service cannot see path, or "" when it can.
func (s *Sandbox) hidden(path string) string {
	if s == nil {
		return ""
	}
	if s.ProtectHome == "yes" || s.ProtectHome == "tmpfs" {
		for _, d := range []string{"/home", "/root", "/run/user"} {
			if under(path, d) {
				return fmt.Sprintf("the unit's ProtectHome=%s hides %s from the service", s.ProtectHome, d)
			}
		}
	}
	if s.PrivateTmp {
		for _, d := range []string{"/tmp", "/var/tmp"} {
			if under(path, d) {
				return fmt.Sprintf("the unit's PrivateTmp=yes gives the service an empty %s of its own", d)
			}
		}
	}
	return ""
}

// writable says whether the sandbox lets the service write path.
func (s *Sandbox) writable(path string) bool {
	if s == nil || !s.StrictSystem {
		return true
	}
	for _, w := range s.Writable {
		if under(path, w) {
			return true
		}
	}
	return false
}

func under(path, dir string) bool {
	path, dir = filepath.Clean(path), filepath.Clean(dir)
	return path == dir || strings.HasPrefix(path, dir+"/")
}
