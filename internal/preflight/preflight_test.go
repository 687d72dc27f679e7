package preflight

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/health"
)

func collect(r *runner) *[]Result {
	var out []Result
	r.report = func(res Result) { out = append(out, res) }
	return &out
}

// signerFiles writes a seed and a client JWT for its public key, expiring at exp, with a trust
// chain signature when tcs is set. The JWT is signed by the seed itself: the check reads it
// unverified, as the signing step does.
func signerFiles(t *testing.T, exp time.Time, tcs string) (seedFile, tokenFile string) {
	t.Helper()
	pub, pri, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	dir := t.TempDir()
	seedFile, tokenFile = filepath.Join(dir, "signer.seed"), filepath.Join(dir, "signer.jwt")
	require.NoError(t, os.WriteFile(seedFile, []byte(hex.EncodeToString(pri.Seed())), 0o600))
	claims := &tokens.ClientIDClaims{CallerID: "choria=provisioner", StandardClaims: tokens.StandardClaims{
		Purpose: tokens.ClientIDPurpose, TrustChainSignature: tcs, PublicKey: hex.EncodeToString(pub),
		RegisteredClaims: jwt.RegisteredClaims{ExpiresAt: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(exp.Add(-400 * 24 * time.Hour))},
	}}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(pri)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(tokenFile, []byte(signed), 0o600))
	return seedFile, tokenFile
}

func TestSignerExpiry(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	cases := []struct {
		name   string
		exp    time.Time
		tcs    string
		status Status
		says   string
	}{
		{"caps", now.Add(100 * 24 * time.Hour), "tcs", OK, "it caps server JWTs"},
		{"does not cap", now.Add(2 * year), "tcs", OK, "end before it"},
		{"soon", now.Add(10 * 24 * time.Hour), "tcs", Warn, "in 10 days"},
		{"expired", now.Add(-time.Hour), "tcs", Fail, "expired 2026-05-31T23:00:00Z"},
		{"no chain", now.Add(year), "", Fail, "no trust chain signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seed, token := signerFiles(t, c.exp, c.tcs)
			r := &runner{o: Options{Now: func() time.Time { return now }}}
			out := collect(r)
			r.checkSigner(&config.Config{JWTSigningKey: seed, JWTSigningToken: token, ServerJWTValidity: "365d", ServerJWTValidityDuration: year})
			require.Len(t, *out, 1)
			require.Equal(t, c.status, (*out)[0].Status, (*out)[0].Detail)
			require.Contains(t, (*out)[0].Detail, c.says)
		})
	}

	t.Run("seed of another key", func(t *testing.T) {
		_, token := signerFiles(t, now.Add(year), "tcs")
		other, _ := signerFiles(t, now.Add(year), "tcs")
		r := &runner{o: Options{Now: func() time.Time { return now }}}
		out := collect(r)
		r.checkSigner(&config.Config{JWTSigningKey: other, JWTSigningToken: token, ServerJWTValidityDuration: year})
		require.Equal(t, Fail, (*out)[0].Status)
		require.Contains(t, (*out)[0].Detail, "does not belong to jwt_signing_token")
	})
}

func TestHelperInterpreter(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		f := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(f, []byte(body), 0o755))
		return f
	}
	good := write("good.sh", "#!/bin/sh\necho {}\n")
	viaEnv := write("env.sh", "#!/usr/bin/env sh\necho {}\n")
	missing := write("missing.rb", "#!/nonexistent/bin/ruby\nputs 1\n")
	missingEnv := write("missing-env.rb", "#!/usr/bin/env no-such-interpreter-here\nputs 1\n")
	notExec := filepath.Join(dir, "plain.sh")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))

	for _, c := range []struct {
		helper string
		status Status
		says   string
	}{
		{good, OK, "with /bin/sh (not run)"},
		{viaEnv + " --site 'dc 1'", OK, "runs " + viaEnv},
		{missing, Fail, "/nonexistent/bin/ruby"},
		{missingEnv, Fail, `"no-such-interpreter-here" is not on PATH`},
		{"sh " + filepath.Join(dir, "absent.sh"), OK, "runs /"}, // an argument that is not there yet is the helper's business
		{"no-such-helper-command", Fail, "not an executable found on PATH"},
	} {
		r := &runner{o: Options{User: "tester"}}
		out := collect(r)
		r.checkHelper(&config.Config{Helper: c.helper})
		require.Len(t, *out, 1, c.helper)
		require.Equal(t, c.status, (*out)[0].Status, "%s: %s", c.helper, (*out)[0].Detail)
		require.Contains(t, (*out)[0].Detail, c.says)
	}
	if os.Geteuid() != 0 { // root may run anything with an x bit; a file without one is refused by SplitHelper
		r := &runner{o: Options{User: "tester"}}
		out := collect(r)
		r.checkHelper(&config.Config{Helper: notExec})
		require.Equal(t, Fail, (*out)[0].Status)
	}
}

func TestSandboxFromUnitAndDropIns(t *testing.T) {
	root := t.TempDir()
	unit := filepath.Join(root, "usr/lib/systemd/system", UnitName)
	require.NoError(t, os.MkdirAll(filepath.Dir(unit), 0o755))
	body, err := os.ReadFile("../../packaging/choria-provisioner.service")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(unit, body, 0o644))

	s, err := LoadSandbox(root, UnitName)
	require.NoError(t, err)
	require.Equal(t, "choria-provisioner", s.User)
	require.Equal(t, "/etc/choria-provisioner/choria-provisioner.yaml", s.Config)
	require.Equal(t, "/etc/choria-provisioner/choria.cfg", s.ChoriaConfig)
	require.Equal(t, "yes", s.ProtectHome)
	require.True(t, s.PrivateTmp)
	require.True(t, s.StrictSystem)
	require.True(t, s.writable("/var/log/choria-provisioner.log"))
	require.True(t, s.writable("/var/lib/choria-provisioner/cache"))
	require.False(t, s.writable("/var/log/other.log"))
	require.Contains(t, s.hidden("/root/helper.rb"), "ProtectHome=yes")
	require.Contains(t, s.hidden("/home/ops/ca/key.pem"), "ProtectHome=yes")
	require.Contains(t, s.hidden("/tmp/codec.key"), "PrivateTmp=yes")
	require.Empty(t, s.hidden("/etc/choria-provisioner/helper"))
	require.Empty(t, s.hidden("/homestead/x"))

	// what a site's drop-in (systemctl edit) changes
	dropin := filepath.Join(root, "etc/systemd/system", UnitName+".d", "override.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(dropin), 0o755))
	require.NoError(t, os.WriteFile(dropin, []byte("[Service]\nUser=root\nProtectHome=read-only\nReadWritePaths=/srv/ca\n"), 0o644))
	s, err = LoadSandbox(root, UnitName)
	require.NoError(t, err)
	require.Equal(t, "root", s.User)
	require.Empty(t, s.hidden("/root/helper.rb"), "read-only home is visible")
	require.True(t, s.writable("/srv/ca/serial"))
	require.True(t, s.writable("/var/log/choria-provisioner.log"), "ReadWritePaths adds to the list")

	none, err := LoadSandbox(t.TempDir(), UnitName)
	require.NoError(t, err)
	require.Nil(t, none)
	require.Empty(t, none.hidden("/tmp/x"), "no unit, no sandbox")
	require.True(t, none.writable("/anywhere"))
}

func TestPrintOneLinePerCheck(t *testing.T) {
	var b strings.Builder
	Print(&b, Result{Name: "broker", Status: Fail, Detail: "nats://127.0.0.1:1: refused", Fix: "start the broker"})
	Print(&b, Result{Name: "temporal", Status: OK, Detail: "127.0.0.1:7233", Fix: "ignored when ok"})
	require.Equal(t, "FAIL  broker             nats://127.0.0.1:1: refused -> start the broker\nok    temporal           127.0.0.1:7233\n", b.String())
}

// check reports what a running service's /readyz reports, each component; with nothing on
// health_port, that the service can listen there; and a port held by another program.
func TestHealthCheck(t *testing.T) {
	m := health.New()
	m.Set(health.Temporal, nil)
	m.Set(health.Broker, errors.New("the worker's connection is down (reconnecting)"))
	m.Expect(health.Discovery)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := health.Serve(ctx, "127.0.0.1:0", m)
	require.NoError(t, err)
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)

	run := func(cfg *config.Config) map[string]Result {
		r := &runner{o: Options{Timeout: 2 * time.Second}}
		out := collect(r)
		r.checkHealth(ctx, cfg)
		got := map[string]Result{}
		for _, res := range *out {
			got[res.Name] = res
		}
		return got
	}
	got := run(&config.Config{HealthPort: port, HealthAddress: "127.0.0.1"})
	require.Equal(t, OK, got["ready: temporal"].Status, "%+v", got)
	require.Equal(t, Fail, got["ready: broker"].Status)
	require.Contains(t, got["ready: broker"].Detail, "down since")
	require.NotContains(t, got["ready: broker"].Detail, "connection is down", "/readyz gives no error text")
	require.Equal(t, Warn, got["ready: discovery"].Status)

	// another program on the port: not a provisioner's /readyz, and the service could not listen
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, busyText, _ := net.SplitHostPort(l.Addr().String())
	busy, _ := strconv.Atoi(busyText)
	require.Equal(t, Fail, run(&config.Config{HealthPort: busy, HealthAddress: "127.0.0.1"})["health"].Status)

	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, freeText, _ := net.SplitHostPort(free.Addr().String())
	require.NoError(t, free.Close())
	freePort, _ := strconv.Atoi(freeText)
	require.Equal(t, OK, run(&config.Config{HealthPort: freePort, HealthAddress: "127.0.0.1"})["health"].Status)
	require.Equal(t, Warn, run(&config.Config{})["health"].Status, "health_port 0")
}
