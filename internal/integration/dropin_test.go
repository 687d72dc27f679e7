package integration

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/choria-io/tokens"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/common/logging"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/internal/service"
	"github.com/choria-temporal/provisioner/workflows"
)

// dropInSite turns the dev site into one made the way the Choria Provisioner's documentation
// makes one: the provisioner's signer JWT issued for 365 days (`choria jwt client ...
// --server-provisioner --validity 365d --issuer`), no server_jwt_validity (so the default year,
// which always ends after the signer's), and the helper an interpreted script named as
// "<interpreter> <script> <quoted argument>".
func dropInSite(t *testing.T, s *devstack.Stack) {
	t.Helper()
	c := s.Creds
	issuerSeed, err := os.ReadFile(c.IssuerSeed)
	require.NoError(t, err)
	issuer := ed25519.NewKeyFromSeed(mustHex(t, strings.TrimSpace(string(issuerSeed))))
	seed, err := os.ReadFile(c.ProvisionerSeed)
	require.NoError(t, err)
	signerPub := ed25519.NewKeyFromSeed(mustHex(t, strings.TrimSpace(string(seed)))).Public().(ed25519.PublicKey)
	claims, err := tokens.NewClientIDClaims(devstack.ProvisionerCallerID, nil, "choria", nil, "", "", 365*24*time.Hour,
		&tokens.ClientPermissions{ServerProvisioner: true}, signerPub)
	require.NoError(t, err)
	require.NoError(t, claims.AddOrgIssuerData(issuer))
	signed, err := tokens.SignToken(claims, issuer)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(c.ProvisionerJWT, []byte(signed), 0o600))

	// a helper as sites write them: a shell script reading the request on stdin
	script := filepath.Join(s.Opts.Dir, "site helper.sh")
	body := fmt.Sprintf(`#!/bin/sh
# the Choria Provisioner's helper contract: one JSON request on stdin, one reply on stdout
input=$(cat)
identity=$(printf '%%s' "$input" | sed -n 's/^{"identity":"\([^"]*\)".*/\1/p')
dir=$(printf '%%s' "$input" | sed -n 's/.*"ed25519_pubkey":{[^}]*"directory":"\([^"]*\)".*/\1/p')
if [ -z "$identity" ] || [ -z "$dir" ]; then echo "no identity or directory in the request" >&2; exit 1; fi
cat <<EOF
{"defer": false, "msg": "configured for site $1",
 "configuration": {
  "identity": "$identity", "loglevel": "info", "logfile": "$dir/server.log",
  "plugin.choria.server.provision": "false", "plugin.choria.middleware_hosts": "%[1]s",
  "plugin.choria.use_srv": "false", "rpcauthorization": "0",
  "plugin.choria.status_file_path": "$dir/status.json",
  "collectives": "choria", "main_collective": "choria",
  "plugin.security.provider": "choria", "plugin.security.issuer.names": "choria",
  "plugin.security.issuer.choria.public": "%[2]s",
  "plugin.security.choria.token_file": "$dir/server.jwt", "plugin.security.choria.seed_file": "$dir/server.seed"},
 "server_claims": {"collectives": ["choria"]}}
EOF
`, s.Broker.URL, c.IssuerPublic)
	require.NoError(t, os.WriteFile(script, []byte(body), 0o644)) // not executable: the interpreter runs it
	s.Opts.Helper = fmt.Sprintf("sh '%s' 'dc 1'", script)
	require.NoError(t, s.RewriteConfig())

	b, err := os.ReadFile(s.ConfigFile)
	require.NoError(t, err)
	conf := regexp.MustCompile(`(?m)^server_jwt_validity:.*\n`).ReplaceAllString(string(b), "")
	require.NotContains(t, conf, "server_jwt_validity")
	require.NoError(t, os.WriteFile(s.ConfigFile, []byte(conf), 0o600))
}

// A site set up exactly as the Choria Provisioner's documentation describes switches without
// changing a file: every host is provisioned through the interpreted helper, and its server JWT,
// capped at the signer token's expiry, verifies against the issuer and lets it connect.
func TestIntegrationDropInChoriaProvisionerSite(t *testing.T) {
	e := newEnv(t, envOptions{servers: 3, prepare: dropInSite})
	require.Equal(t, []string{"sh", filepath.Join(e.stack.Opts.Dir, "site helper.sh"), "dc 1"}, e.cfg.HelperCommand)
	require.Equal(t, 365*24*time.Hour, e.cfg.ServerJWTValidityDuration, "the Choria Provisioner's default")
	signerRaw, err := os.ReadFile(e.stack.Creds.ProvisionerJWT)
	require.NoError(t, err)
	signer, err := tokens.ParseClientIDTokenUnverified(string(signerRaw))
	require.NoError(t, err)

	e.provisioner("replica-a")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)

	issuerPub := ed25519.PublicKey(mustHex(t, e.stack.Creds.IssuerPublic))
	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m)
		raw, err := os.ReadFile(filepath.Join(m.Dir, "server.jwt"))
		require.NoError(t, err)
		claims, err := tokens.ParseServerToken(string(raw), issuerPub)
		require.NoError(t, err)
		require.False(t, claims.ExpiresAt.After(signer.ExpiresAt.Time), "%s: the server JWT outlives the signer token", m.Identity)
		require.Equal(t, signer.ExpiresAt.Unix(), claims.ExpireTime().Unix(), m.Identity)

		d := e.waitOutcome(m.Identity, workflows.OutcomeProvisioned)
		require.Equal(t, "configured for site dc 1", d.State.HelperMessage, "the quoted argument reached the helper whole")
		var note string
		for _, r := range d.State.Timeline {
			if r.Step == workflows.StepSign {
				note = r.Note
			}
		}
		require.Equal(t, fmt.Sprintf("server JWT expires %s, with jwt_signing_token: the validity asked for was longer",
			signer.ExpiresAt.UTC().Format(time.RFC3339)), note, m.Identity)
	}

	// hosts show prints the note in the timeline
	out, code := e.cli(nil, "show", e.stack.Fleet.Members[0].Identity)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "with jwt_signing_token")

	// one warning per host in the provisioner's log
	log, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, "replica-a.log"))
	require.NoError(t, err)
	warnings := 0
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "server JWT expiry capped at jwt_signing_token's expiry") {
			warnings++
		}
	}
	if warnings != len(e.stack.Fleet.Members) {
		t.Logf("LOG %s", log)
	}
	require.Equal(t, len(e.stack.Fleet.Members), warnings)
	t.Logf("drop-in site: %d hosts provisioned, server JWTs end with the signer token at %s", len(e.stack.Fleet.Members),
		signer.ExpiresAt.UTC().Format(time.RFC3339))
}

// listening reports the local addresses the TCP sockets listening on port are bound to.
func listening(t *testing.T, port int) []string {
	t.Helper()
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(l)
			if len(fields) < 4 || fields[3] != "0A" { // LISTEN
				continue
			}
			addr, p, ok := strings.Cut(fields[1], ":")
			if ok && p == fmt.Sprintf("%04X", port) {
				out = append(out, addr)
			}
		}
	}
	return out
}

// The Choria Provisioner's command line and files: `choria-provisioner --debug run --config FILE
// --choria-config FILE --pid FILE`, a YAML without our choria_config and monitor_address keys.
// The process provisions, writes its pid, serves /metrics on every interface of monitor_port
// with the Choria Provisioner's series at 0 from the start and go-choria's process-wide ones, and
// the signer token's expiry.
func TestIntegrationChoriaProvisionerCommandLine(t *testing.T) {
	e := newEnv(t, envOptions{servers: 2})
	port, err := devstack.FreePort()
	require.NoError(t, err)
	b, err := os.ReadFile(e.stack.ConfigFile)
	require.NoError(t, err)
	conf := regexp.MustCompile(`(?m)^(choria_config|monitor_address|monitor_port):.*\n`).ReplaceAllString(string(b), "")
	conf += fmt.Sprintf("monitor_port: %d\n", port)
	file := filepath.Join(e.stack.Opts.Dir, "choria-provisioner.yaml")
	require.NoError(t, os.WriteFile(file, []byte(conf), 0o600))
	pid := filepath.Join(e.stack.Opts.Dir, "provisioner.pid")

	cli := e.spawn("cli", selfBinary, []string{"--debug", "run", "--config", file, "--choria-config", e.stack.ClientConfig, "--pid", pid},
		"PROVISIONER_LOGFILE="+filepath.Join(e.stack.Opts.Dir, "cli.log"))

	var first exposition
	require.Eventually(t, func() bool { first, err = scrape(port); return err == nil }, 30*time.Second, 50*time.Millisecond, "/metrics")
	for _, name := range []string{"choria_provisioner_discovered", "choria_provisioner_provisioned", "choria_provisioner_waiting_nodes",
		"choria_provisioner_work_queue_entries", "choria_provisioner_paused"} {
		require.Len(t, first.values(name, "site", "dev"), 1, name)
	}
	require.Equal(t, []float64{0}, first.values("choria_provisioner_paused", "site", "dev"))
	require.Contains(t, first, "go_goroutines")
	require.Contains(t, first, "process_resident_memory_bytes")
	bound := listening(t, port)
	require.NotEmpty(t, bound)
	for _, a := range bound {
		require.Regexp(t, `^0+$`, a, "monitor_port alone listens on every interface")
	}

	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	for _, m := range e.stack.Fleet.Members {
		e.verifyServerJWT(m)
	}
	p, err := os.ReadFile(pid)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(cli.pid()), string(p))
	m, err := scrape(port)
	require.NoError(t, err)
	require.Equal(t, []float64{2}, m.values("choria_provisioner_provisioned", "site", "dev"))
	connector := 0
	for name := range m {
		if strings.HasPrefix(name, "choria_connector_") {
			connector++
		}
	}
	require.Positive(t, connector, "the go-choria connector's series")
	// the signer's expiry, read from jwt_signing_token, for the expiring-signer alert
	exp, err := service.SignerExpiry(e.stack.Creds.ProvisionerJWT)
	require.NoError(t, err)
	require.Equal(t, []float64{float64(exp.Unix())}, m.values("choria_provisioner_signer_expiry_timestamp_seconds", "site", "dev"))
	log, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, "cli.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), `"level":"debug"`, "--debug before the command")
}

// The queue gauges mean what they meant for the Choria Provisioner: waiting_nodes the hosts found
// and not yet done, work_queue_entries those waiting for a worker. With discovery running and no
// worker anywhere, every host found waits in both; once a worker runs, both drain to 0.
func TestIntegrationQueueGauges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{servers: 3})
	log, err := logging.New("info", filepath.Join(e.stack.Opts.Dir, "discovery-only.log"))
	require.NoError(t, err)
	svc, err := service.New(e.cfg, log, service.Options{Discovery: true, Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })

	gauge := func(g *prometheus.GaugeVec) float64 { return testutil.ToFloat64(g.WithLabelValues("dev")) }
	require.Eventually(t, func() bool {
		return gauge(svc.Metrics.WaitingNodes) == 3 && gauge(svc.Metrics.WorkQueueEntries) == 3
	}, 40*time.Second, 200*time.Millisecond, "3 hosts found and waiting for a worker (waiting_nodes %v, work_queue_entries %v)",
		gauge(svc.Metrics.WaitingNodes), gauge(svc.Metrics.WorkQueueEntries))

	e.provisioner("worker")
	e.waitProvisioned(90*time.Second, e.stack.Fleet.Members...)
	require.Eventually(t, func() bool {
		return gauge(svc.Metrics.WaitingNodes) == 0 && gauge(svc.Metrics.WorkQueueEntries) == 0
	}, 40*time.Second, 200*time.Millisecond, "both drain once the hosts are done")
}
