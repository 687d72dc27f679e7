package preflight

import (
	"bufio"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	cconfig "github.com/choria-io/go-choria/config"
	"github.com/choria-io/tokens"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/codec"
)

// checkConfig loads and validates the configuration. When validation fails the rest of the
// checks still run on what could be read (so one pass reports every problem), unless even the
// temporal section is unusable.
func (r *runner) checkConfig() *config.Config {
	cfg, err := config.Load(r.o.ConfigFile)
	if err == nil {
		r.applyOverrides(cfg)
		src := "its choria_config"
		if r.o.ChoriaConfig != "" {
			src = "--choria-config"
		}
		r.emit(Result{Name: "config", Status: OK, Detail: fmt.Sprintf("%s is valid (Choria client configuration %s, from %s)", r.o.ConfigFile, orNone(cfg.ChoriaConfig), src)})
		return cfg
	}
	r.emit(Result{Name: "config", Status: Fail, Detail: fmt.Sprintf("%s: %v", r.o.ConfigFile, err), Fix: r.configFix(err)})
	cfg, err = config.Parse(r.o.ConfigFile)
	if err != nil {
		r.emit(Result{Name: "checks", Status: Skip, Detail: "nothing else can be checked without a readable configuration"})
		return nil
	}
	r.applyOverrides(cfg)
	// the parsed forms the checks use, where the values parse
	cfg.ServerJWTValidityDuration, _ = config.ParseDuration(cfg.ServerJWTValidity)
	if cfg.Features.ED25519 {
		cfg.Features.JWT = true
	}
	return cfg
}

func (r *runner) applyOverrides(cfg *config.Config) {
	if r.o.ChoriaConfig != "" {
		cfg.ChoriaConfig = r.o.ChoriaConfig
	}
}

func (r *runner) configFix(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return r.permissionFix(pe.Path, pe.Err, false)
	}
	if errors.Is(err, config.ErrInvalid) {
		return "correct the key named (docs/configuration.md lists every key and its default)"
	}
	return "correct the file"
}

// ref is a file the configuration names.
type ref struct {
	key   string
	path  string
	write bool // the service appends to it (the log)
	// secret: a key, seed or token no other user may read (config.CheckKeyFile); the service
	// refuses its own (refuse), go-choria reads the Choria client's, which are warned about
	secret, refuse bool
}

// refs lists every file the configuration (and its Choria client configuration) names.
func (r *runner) refs(cfg *config.Config) []ref {
	out := []ref{{key: "--config", path: r.o.ConfigFile}}
	key := "choria_config"
	if r.o.ChoriaConfig != "" {
		key = "--choria-config"
	}
	if cfg.ChoriaConfig != "" {
		out = append(out, ref{key: key, path: cfg.ChoriaConfig})
	}
	if cfg.Features.JWT || cfg.Features.ED25519 {
		// jwt_verify_cert is a file or a hex key; a value that is not a key is a file
		if b, err := hex.DecodeString(cfg.JWTVerifyCert); cfg.JWTVerifyCert != "" && (err != nil || len(b) != ed25519.PublicKeySize) {
			out = append(out, ref{key: "jwt_verify_cert", path: cfg.JWTVerifyCert})
		}
	}
	if cfg.JWTSigningKey != "" {
		out = append(out, ref{key: "jwt_signing_key", path: cfg.JWTSigningKey, secret: true, refuse: true})
	}
	if cfg.JWTSigningToken != "" {
		out = append(out, ref{key: "jwt_signing_token", path: cfg.JWTSigningToken})
	}
	if cfg.Temporal.CodecKeyFile != "" && os.Getenv(config.CodecKeyEnv) == "" {
		out = append(out, ref{key: "temporal.codec_key_file", path: cfg.Temporal.CodecKeyFile, secret: true, refuse: true})
	}
	for _, f := range []struct {
		key, path string
		secret    bool
	}{
		{"temporal.tls.ca_file", cfg.Temporal.TLS.CAFile, false},
		{"temporal.tls.cert_file", cfg.Temporal.TLS.CertFile, false},
		{"temporal.tls.key_file", cfg.Temporal.TLS.KeyFile, true},
		{"temporal.api_key_file", cfg.Temporal.APIKeyFile, true},
		{"secrets_key_file", cfg.SecretsKeyFile, true},
	} {
		if f.path != "" {
			out = append(out, ref{key: f.key, path: f.path, secret: f.secret, refuse: f.secret})
		}
	}
	if cfg.Logfile != "" && cfg.Logfile != "-" {
		out = append(out, ref{key: "logfile", path: cfg.Logfile, write: true})
	}
	out = append(out, r.choriaRefs(cfg)...)
	return out
}

// choriaRefs are the key, certificate, token and seed files of the Choria client configuration.
func (r *runner) choriaRefs(cfg *config.Config) []ref {
	if cfg.ChoriaConfig == "" {
		return nil
	}
	if _, err := os.Stat(cfg.ChoriaConfig); err != nil {
		return nil // reported as a file problem already
	}
	cc, err := cconfig.NewSystemConfig(cfg.ChoriaConfig, false)
	if err != nil {
		r.emit(Result{Name: "choria config", Status: Fail, Detail: fmt.Sprintf("%s: %v", cfg.ChoriaConfig, err), Fix: "correct the Choria client configuration"})
		return nil
	}
	c := cc.Choria
	var out []ref
	for _, f := range []struct {
		key, path string
		secret    bool
	}{
		{"plugin.security.file.certificate", c.FileSecurityCertificate, false},
		{"plugin.security.file.key", c.FileSecurityKey, true},
		{"plugin.security.file.ca", c.FileSecurityCA, false},
		{"plugin.security.choria.certificate", c.ChoriaSecurityCertificate, false},
		{"plugin.security.choria.key", c.ChoriaSecurityKey, true},
		{"plugin.security.choria.ca", c.ChoriaSecurityCA, false},
		{"plugin.security.choria.token_file", c.ChoriaSecurityTokenFile, false},
		{"plugin.security.choria.seed_file", c.ChoriaSecuritySeedFile, true},
		{"plugin.choria.security.request_signer.token_file", c.RemoteSignerTokenFile, false},
		{"plugin.choria.security.request_signer.seed_file", c.RemoteSignerTokenSeedFile, true},
	} {
		if f.path != "" {
			out = append(out, ref{key: filepath.Base(cfg.ChoriaConfig) + " " + f.key, path: f.path, secret: f.secret})
		}
	}
	return out
}

// checkFiles: each file readable (the log writable) by this process's real user, and visible
// to the service through the unit's sandbox.
func (r *runner) checkFiles(cfg *config.Config) {
	for _, f := range r.refs(cfg) {
		what := fmt.Sprintf("%s %s", f.key, f.path)
		if why := r.o.Sandbox.hidden(f.path); why != "" {
			r.emit(Result{Name: "file", Status: Fail, Detail: what + ": " + why,
				Fix: "move it under /etc/choria-provisioner, or loosen the unit in a drop-in (systemctl edit choria-provisioner)"})
			continue
		}
		if f.write {
			r.checkWritable(f, what)
			continue
		}
		if err := access(f.path, 4); err != nil {
			r.emit(Result{Name: "file", Status: Fail, Detail: fmt.Sprintf("%s: %s", what, r.problem(err)), Fix: r.permissionFix(f.path, err, false)})
			continue
		}
		if f.secret {
			var kf *config.KeyFileError
			if err := config.CheckKeyFile(f.path); errors.As(err, &kf) {
				st, then := Fail, "the service refuses it"
				if !f.refuse {
					// go-choria reads it, as the Choria Provisioner did: said, not refused
					st, then = Warn, "the key of the provisioner's Choria identity"
				}
				r.emit(Result{Name: "file", Status: st, Detail: fmt.Sprintf("%s: %s by %s (mode %04o): %s", what, kf.What, kf.Who, kf.Mode.Perm(), then), Fix: kf.Fix})
				continue
			}
		}
		r.emit(Result{Name: "file", Status: OK, Detail: what + " readable by " + r.o.User})
	}
}

func (r *runner) checkWritable(f ref, what string) {
	if !r.o.Sandbox.writable(f.path) {
		r.emit(Result{Name: "file", Status: Fail, Detail: fmt.Sprintf("%s: the unit's ProtectSystem=strict lets the service write only %s", what, strings.Join(r.o.Sandbox.Writable, " ")),
			Fix: "log to /var/log/choria-provisioner.log (or leave logfile empty for the journal), or add ReadWritePaths= in a drop-in"})
		return
	}
	target := f.path
	if _, err := os.Stat(f.path); errors.Is(err, os.ErrNotExist) {
		target = filepath.Dir(f.path) // the service creates it
	}
	if err := access(target, 2); err != nil {
		r.emit(Result{Name: "file", Status: Fail, Detail: fmt.Sprintf("%s: cannot write %s: %s", what, target, r.problem(err)), Fix: r.permissionFix(target, err, true)})
		return
	}
	r.emit(Result{Name: "file", Status: OK, Detail: what + " writable by " + r.o.User})
}

// problem says what err means for the service user.
func (r *runner) problem(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "does not exist"
	case errors.Is(err, os.ErrPermission):
		return "permission denied for " + r.o.User
	}
	return err.Error()
}

// permissionFix says how to make path readable (or writable) by the service user.
func (r *runner) permissionFix(path string, err error, write bool) string {
	if errors.Is(err, os.ErrNotExist) {
		return "create it, or correct the key that names it"
	}
	if !errors.Is(err, os.ErrPermission) {
		return "correct the path"
	}
	if dir := r.unsearchable(path); dir != "" {
		return fmt.Sprintf("let %s into %s (chgrp %s %s && chmod g+x %s)", r.o.User, dir, r.o.User, dir, dir)
	}
	bit := "r"
	if write {
		bit = "w"
	}
	return fmt.Sprintf("chgrp %s %s && chmod g+%s %s (or set the group in the site's Puppet file resource)", r.o.User, path, bit, path)
}

// unsearchable is the first directory above path that the user cannot enter.
func (r *runner) unsearchable(path string) string {
	dir := filepath.Dir(filepath.Clean(path))
	var dirs []string
	for ; dir != "/" && dir != "."; dir = filepath.Dir(dir) {
		dirs = append([]string{dir}, dirs...)
	}
	for _, d := range dirs {
		if err := access(d, 1); err != nil {
			return d
		}
	}
	return ""
}

// access is access(2): the real user's permission, which is the service user's when the caller
// switched to it; ACLs count.
func access(path string, mode uint32) error {
	if err := syscall.Access(path, mode); err != nil {
		return &os.PathError{Op: "access", Path: path, Err: err}
	}
	return nil
}

// checkHelper resolves the helper's command as the worker will when it runs it (the same
// splitter and lookup, config.SplitHelper) and, for a script, its interpreter. It runs nothing.
func (r *runner) checkHelper(cfg *config.Config) {
	if cfg.Helper == "" {
		r.emit(Result{Name: "helper", Status: Fail, Detail: "helper is not set", Fix: "set helper to the site's helper command"})
		return
	}
	words, err := config.SplitHelper(cfg.Helper)
	if err != nil {
		r.emit(Result{Name: "helper", Status: Fail, Detail: err.Error(),
			Fix: "install the helper (or its interpreter), or name it by its full path"})
		return
	}
	path, _ := exec.LookPath(words[0])
	if why := r.o.Sandbox.hidden(path); why != "" {
		r.emit(Result{Name: "helper", Status: Fail, Detail: fmt.Sprintf("%s: %s", path, why), Fix: "move the helper, or loosen the unit in a drop-in"})
		return
	}
	if err := access(path, 1); err != nil {
		r.emit(Result{Name: "helper", Status: Fail, Detail: fmt.Sprintf("%s: cannot be run: %s", path, r.problem(err)), Fix: r.permissionFix(path, err, false) + " and chmod g+x"})
		return
	}
	detail := fmt.Sprintf("%q runs %s", cfg.Helper, path)
	interp, err := interpreter(path)
	switch {
	case err != nil:
		r.emit(Result{Name: "helper", Status: Fail, Detail: fmt.Sprintf("%s: %v", path, err), Fix: "install the interpreter its #! line names, or correct that line"})
		return
	case interp != "":
		detail += " with " + interp
	}
	// a script given as the interpreter's argument ("ruby /etc/x/helper.rb") must be readable
	for _, w := range words[1:] {
		if filepath.IsAbs(w) {
			if _, err := os.Stat(w); err == nil {
				if err := access(w, 4); err != nil {
					r.emit(Result{Name: "helper", Status: Fail, Detail: fmt.Sprintf("argument %s: %s", w, r.problem(err)), Fix: r.permissionFix(w, err, false)})
					return
				}
			}
		}
	}
	r.emit(Result{Name: "helper", Status: OK, Detail: detail + " (not run)"})
}

// interpreter reads a script's #! line and resolves the program it names ("/usr/bin/env ruby"
// resolves ruby on PATH); "" for a binary.
func interpreter(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if !strings.HasPrefix(line, "#!") {
		return "", nil
	}
	words := strings.Fields(strings.TrimPrefix(line, "#!"))
	if len(words) == 0 {
		return "", fmt.Errorf("empty #! line")
	}
	prog := words[0]
	if filepath.Base(prog) == "env" && len(words) > 1 {
		args := words[1:]
		if args[0] == "-S" && len(args) > 1 {
			args = args[1:]
		}
		found, err := exec.LookPath(args[0])
		if err != nil {
			return "", fmt.Errorf("its interpreter %q is not on PATH (%s)", args[0], os.Getenv("PATH"))
		}
		return found, nil
	}
	if err := access(prog, 1); err != nil {
		return "", fmt.Errorf("its interpreter %s: %w", prog, err)
	}
	return prog, nil
}

// checkSigner reads jwt_signing_token (unverified, as the signing step does): it must carry a
// trust chain signature, belong to jwt_signing_key and not have expired; its expiry caps the
// server JWTs signed with it.
func (r *runner) checkSigner(cfg *config.Config) {
	if cfg.JWTSigningToken == "" {
		if cfg.Features.ED25519 {
			r.emit(Result{Name: "signer", Status: OK, Detail: fmt.Sprintf("no jwt_signing_token: server JWTs are signed by jwt_signing_key alone and last server_jwt_validity (%s)", cfg.ServerJWTValidity)})
		}
		return
	}
	b, err := os.ReadFile(cfg.JWTSigningToken)
	if err != nil {
		return // reported by the file check
	}
	t, err := tokens.ParseClientIDTokenUnverified(strings.TrimSpace(string(b)))
	if err != nil {
		r.emit(Result{Name: "signer", Status: Fail, Detail: fmt.Sprintf("jwt_signing_token %s is not a Choria client JWT: %v", cfg.JWTSigningToken, err), Fix: "point jwt_signing_token at the provisioner's signer JWT"})
		return
	}
	if t.TrustChainSignature == "" {
		r.emit(Result{Name: "signer", Status: Fail, Detail: "jwt_signing_token has no trust chain signature: servers could not verify JWTs it chains", Fix: "issue the signer token from the organisation issuer (choria jwt client ... --issuer)"})
		return
	}
	if seed, err := os.ReadFile(cfg.JWTSigningKey); err == nil {
		s, err := hex.DecodeString(strings.TrimSpace(string(seed)))
		if err != nil || len(s) != ed25519.SeedSize {
			r.emit(Result{Name: "signer", Status: Fail, Detail: "jwt_signing_key is not a hex ed25519 seed", Fix: "point jwt_signing_key at the signer's seed file"})
			return
		}
		pub := hex.EncodeToString(ed25519.NewKeyFromSeed(s).Public().(ed25519.PublicKey))
		if t.PublicKey != "" && t.PublicKey != pub {
			r.emit(Result{Name: "signer", Status: Fail, Detail: "jwt_signing_key does not belong to jwt_signing_token (the token is for another public key)", Fix: "use the seed the signer token was issued for"})
			return
		}
	}
	exp := t.ExpireTime()
	if exp.IsZero() {
		r.emit(Result{Name: "signer", Status: OK, Detail: fmt.Sprintf("jwt_signing_token never expires: server JWTs last server_jwt_validity (%s)", cfg.ServerJWTValidity)})
		return
	}
	now := r.now()
	if !exp.After(now) {
		r.emit(Result{Name: "signer", Status: Fail, Detail: fmt.Sprintf("jwt_signing_token expired %s: no server can be provisioned", exp.UTC().Format(time.RFC3339)), Fix: "renew the signer token (the seed may stay) and replace the file; no restart is needed"})
		return
	}
	left := exp.Sub(now)
	asked := now.Add(cfg.ServerJWTValidityDuration)
	detail := fmt.Sprintf("jwt_signing_token expires %s (in %s)", exp.UTC().Format(time.RFC3339), days(left))
	if cfg.ServerJWTValidityDuration > 0 && exp.Before(asked) {
		detail += fmt.Sprintf(": it caps server JWTs, which end then instead of after server_jwt_validity (%s) or the helper's expiry", cfg.ServerJWTValidity)
	} else if cfg.ServerJWTValidityDuration > 0 {
		detail += fmt.Sprintf(": server JWTs (server_jwt_validity %s) end before it", cfg.ServerJWTValidity)
	}
	st, fix := OK, ""
	if left < 30*24*time.Hour {
		st, fix = Warn, "renew the signer token soon: servers provisioned now must be re-provisioned when it ends"
	}
	r.emit(Result{Name: "signer", Status: st, Detail: detail, Fix: fix})
}

// checkCodecKey loads the payload keys the way the service does.
func (r *runner) checkCodecKey(cfg *config.Config) *codec.Codec {
	if cfg.Temporal.Plaintext {
		r.emit(Result{Name: "codec key", Status: Warn, Detail: "temporal.plaintext is on: payloads (helper answers, signed JWTs) are stored unencrypted", Fix: "set temporal.codec_key_file for production"})
		return nil
	}
	var keys []string
	src := config.CodecKeyEnv
	if env := os.Getenv(config.CodecKeyEnv); env != "" {
		keys = strings.Split(env, ",")
	} else {
		src = cfg.Temporal.CodecKeyFile
		var err error
		if keys, err = codec.LoadKeyFile(cfg.Temporal.CodecKeyFile); err != nil {
			r.emit(Result{Name: "codec key", Status: Fail, Detail: err.Error(), Fix: "make the key file readable, or create it: openssl rand -hex 32 (the same file on every replica)"})
			return nil
		}
	}
	c, err := codec.New(keys...)
	if err != nil {
		r.emit(Result{Name: "codec key", Status: Fail, Detail: fmt.Sprintf("%s: %v", src, err), Fix: "one 64-character hex key a line, active key first (openssl rand -hex 32)"})
		return nil
	}
	r.emit(Result{Name: "codec key", Status: OK, Detail: fmt.Sprintf("%d key(s) from %s, active key id %s", len(keys), src, c.ActiveKeyID())})
	return c
}

func (r *runner) now() time.Time {
	if r.o.Now != nil {
		return r.o.Now()
	}
	return time.Now()
}

func days(d time.Duration) string {
	if d < 48*time.Hour {
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
