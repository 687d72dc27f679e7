//go:build compose

package integration

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/workflows"
)

// The docker-compose stack for real, on the project's own Docker engine with every image built
// here (scripts/test-compose.sh starts the engine, builds the images and runs this test; it is
// not part of `go test ./...`): docker-compose up, every service in the state its role says
// (one-shots exited 0, the rest running with a health check that says healthy), every published
// port on the host's loopback, the three demo servers provisioned (`choria-provisioner hosts
// list --json` through the published frontend port), the Web UI decoding a host through the
// codec server once the browser logged in there with the token (Chromium; nothing decoded for
// the UI's origin without it), /metrics counting them, and docker-compose down -v leaving
// nothing of the project behind.
func TestComposeStack(t *testing.T) {
	env := func(k string) string {
		v := os.Getenv(k)
		require.NotEmpty(t, v, "%s is set by scripts/test-compose.sh (make test-compose)", k)
		return v
	}
	project := env("COMPOSE_PROJECT_NAME")
	temporalPort, uiPort, metricsPort := env("DEMO_TEMPORAL_PORT"), env("DEMO_UI_PORT"), env("DEMO_METRICS_PORT")
	codecPort := env("DEMO_CODEC_PORT")
	env("DOCKER_HOST")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)

	compose := func(args ...string) (string, error) {
		// up waits for the one-shots its services depend on; nothing here may wait for ever
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"--project-directory", root, "-f", filepath.Join(root, "docker-compose.yaml")}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	docker := func(args ...string) string {
		out, err := exec.Command("docker", args...).CombinedOutput()
		require.NoError(t, err, "docker %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	leftovers := func() string {
		label := "label=com.docker.compose.project=" + project
		return docker("ps", "-aq", "--filter", label) + docker("volume", "ls", "-q", "--filter", label) + docker("network", "ls", "-q", "--filter", label)
	}
	require.Empty(t, leftovers(), "a previous run of project %s left containers, volumes or networks", project)

	down := false
	t.Cleanup(func() {
		if !down {
			out, _ := compose("logs", "--no-color", "--tail=40")
			t.Logf("compose logs:\n%s", out)
			_, _ = compose("down", "-v", "--remove-orphans")
		}
	})

	started := time.Now()
	out, err := compose("up", "-d", "--no-build")
	require.NoError(t, err, "docker-compose up: %s", out)
	t.Logf("docker-compose up -d returned after %.1fs", time.Since(started).Seconds())

	// every service in the state its role says: a failing command, user, volume permission,
	// dependency or health check shows here. Every long-running service has a health check
	// (the provisioner's is its /readyz) and is healthy.
	oneShots := map[string]bool{"temporal-admin-tools": true, "temporal-create-namespace": true, "credentials": true, "setup": true}
	services, err := compose("config", "--services")
	require.NoError(t, err, services)
	names := strings.Fields(services)
	require.Len(t, names, 13)
	container := func(svc string) string {
		id, err := compose("ps", "-q", svc)
		require.NoError(t, err, id)
		id = strings.TrimSpace(id)
		require.NotEmpty(t, id, "service %s has no container", svc)
		return id
	}
	state := func(svc string) (status, health string, exit int) {
		f := strings.Fields(docker("inspect", "--format", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}-{{end}} {{.State.ExitCode}}", container(svc)))
		fmt.Sscan(f[2], &exit)
		return f[0], f[1], exit
	}
	for _, svc := range names {
		if oneShots[svc] {
			continue
		}
		id := container(svc)
		require.NotEqual(t, "none", docker("inspect", "--format", "{{if .Config.Healthcheck}}{{index .Config.Healthcheck.Test 0}}{{else}}none{{end}}", id),
			"long-running service %s has no health check", svc)
		// published ports on the host's loopback only: nothing of the demo, decoding least of
		// all, is open to the network
		var bindings map[string][]struct{ HostIP string }
		require.NoError(t, json.Unmarshal([]byte(docker("inspect", "--format", "{{json .HostConfig.PortBindings}}", id)), &bindings))
		for port, bs := range bindings {
			for _, b := range bs {
				require.Equal(t, "127.0.0.1", b.HostIP, "%s publishes %s on %q", svc, port, b.HostIP)
			}
		}
	}
	// checked in the test's goroutine: a one-shot that failed or a service that exited fails at once
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ready := true
		for _, svc := range names {
			status, health, exit := state(svc)
			if oneShots[svc] {
				require.False(t, status == "exited" && exit != 0, "one-shot %s exited %d", svc, exit)
				ready = ready && status == "exited"
				continue
			}
			require.NotEqual(t, "exited", status, "service %s exited (%d)", svc, exit)
			require.NotEqual(t, "unhealthy", health, "service %s is unhealthy", svc)
			ready = ready && status == "running" && health == "healthy"
		}
		if ready {
			break
		}
		require.True(t, time.Now().Before(deadline), "the services did not all reach their state in 3 minutes")
		time.Sleep(time.Second)
	}

	// the operator CLI on the host, through the published frontend port, with the stack's codec key
	dir := t.TempDir()
	provisioner := strings.TrimSpace(mustOut(t, compose, "ps", "-q", "provisioner"))
	docker("cp", provisioner+":/site/codec.key", filepath.Join(dir, "codec.key"))
	cfg := filepath.Join(dir, "operator.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`temporal:
  address: 127.0.0.1:%s
  namespace: default
  task_queue: choria-provisioner
  codec_key_file: %s
`, temporalPort, filepath.Join(dir, "codec.key"))), 0o600))
	nodes := []string{"node1.demo.example", "node2.demo.example", "node3.demo.example"}
	var hosts []operator.Host
	require.Eventually(t, func() bool {
		out, err := exec.Command(selfBinary, "hosts", "list", "--json", "--config", cfg).Output()
		if err != nil {
			return false
		}
		hosts = nil
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") { // a host a line
			var h operator.Host
			if line != "" && json.Unmarshal([]byte(line), &h) != nil {
				return false
			}
			if line != "" {
				hosts = append(hosts, h)
			}
		}
		done := 0
		for _, h := range hosts {
			if h.Outcome == workflows.OutcomeProvisioned {
				done++
			}
		}
		return done == len(nodes)
	}, 4*time.Minute, time.Second, "the three demo servers were not provisioned: %+v", hosts)
	t.Logf("COMPOSE: docker-compose up -> all %d demo servers provisioned in %.1fs", len(nodes), time.Since(started).Seconds())
	require.Len(t, hosts, len(nodes))
	runs := map[string]string{}
	for _, h := range hosts {
		runs[h.Identity] = h.RunID
	}
	for i, n := range nodes {
		require.Contains(t, runs, n)
		// the container holds what provisioning leaves: its server JWT and a configuration that
		// turned provisioning off
		conf, err := compose("exec", "-T", fmt.Sprintf("node%d", i+1), "sh", "-c",
			"test -s /var/lib/choria-provisioner/server.jwt && cat /var/lib/choria-provisioner/server.conf")
		require.NoError(t, err, conf)
		require.Contains(t, conf, "plugin.choria.server.provision=false")
	}

	// /metrics on the published port counts them
	port, err := strconv.Atoi(metricsPort)
	require.NoError(t, err)
	x, err := scrape(port)
	require.NoError(t, err)
	require.Equal(t, []float64{3}, x.values("choria_provisioner_provisioned", "site", "dev"), "provisioned counter")

	// the codec server decodes nothing for the UI's origin without a session, nor without the
	// UI's origin
	codecURL := "http://localhost:" + codecPort
	uiOrigin := "http://localhost:" + uiPort
	for _, origin := range []string{uiOrigin, ""} {
		req, err := http.NewRequest(http.MethodPost, codecURL+"/decode", strings.NewReader(`{"payloads":[]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a decode from origin %q without a session", origin)
	}

	// the browser logs in at the codec server with the token, once, and is sent back to the UI
	docker("cp", strings.TrimSpace(mustOut(t, compose, "ps", "-q", "codec-server"))+":/site/codec-server.token", filepath.Join(dir, "codec-server.token"))
	token, err := os.ReadFile(filepath.Join(dir, "codec-server.token"))
	require.NoError(t, err)
	shots := dir
	if os.Getenv("WRITE_SCREENSHOTS") != "" {
		shots = filepath.Join(root, "docs", "images")
	}
	b := newBrowser(t)
	b.open(codecURL+"/login", "#token")
	b.fill("#token", strings.TrimSpace(string(token)))
	b.click("#login")
	b.waitURL(uiOrigin + "/")

	// the Web UI on its published port, decoding a host through the codec server
	page := fmt.Sprintf("%s/namespaces/default/workflows/%s/%s/history", uiOrigin, url.PathEscape(workflows.WorkflowID(nodes[0])), runs[nodes[0]])
	b.open(page, `//h2[contains(., "Input")]`)
	b.waitText(fmt.Sprintf(`"identity": %q`, nodes[0]))
	b.waitFor(`[data-testid="data-encoder-status-success"]`)
	b.shot(filepath.Join(shots, "compose-ui-host.png"))
	requireDecoded(t, b)

	out, err = compose("down", "-v", "--remove-orphans")
	require.NoError(t, err, "docker-compose down -v: %s", out)
	down = true
	require.Empty(t, leftovers(), "docker-compose down -v left containers, volumes or networks of %s", project)
}

// fill types value into the field sel names.
func (b *browser) fill(sel, value string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, chromedp.SendKeys(sel, value)), "typing into %s", sel)
}

// waitURL waits until the page's location starts with prefix (a redirect done).
func (b *browser) waitURL(prefix string) {
	b.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		loc, err := chromedp.Run(b.ctx, chromedp.Location())
		if err == nil && strings.HasPrefix(loc, prefix) {
			return
		}
		require.True(b.t, time.Now().Before(deadline), "the page stayed at %s (%v): %s", loc, err, b.text())
		time.Sleep(200 * time.Millisecond)
	}
}

func mustOut(t *testing.T, f func(...string) (string, error), args ...string) string {
	t.Helper()
	out, err := f(args...)
	require.NoError(t, err, out)
	return out
}

// composeImage is the project's image as scripts/compose-images.sh tags it.
const composeImage = "choria-temporal-provisioner:local"

// The project's image runs site helpers written in Ruby, as the Choria Provisioner's image did:
// a helper of this repository's own (testdata/ruby-helper/provision-helper) that requires what
// the original's sample helpers and choria-io/helm's stock helper require (json, yaml, base64,
// net/http, openssl) and uses each, run through the provisioner's own helper runner with the
// request the helper step sends, in the image as the chart runs it: user 2048, a read-only root
// with a writable /tmp, no network. PROVISIONER_ORIGINAL_HELPERS (paths, colon-separated) runs
// the originals too, unchanged; they are not in this repository, and CI has no network to fetch
// them (docs/deployment.md says how to run them).
func TestComposeImageRunsRubyHelpers(t *testing.T) {
	require.NotEmpty(t, os.Getenv("DOCKER_HOST"), "DOCKER_HOST is set by scripts/test-compose.sh (make test-compose)")
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755)) // the helper runs as the image's user, 2048
	install := func(src, name string) {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o755))
	}
	install(filepath.Join("testdata", "ruby-helper", "provision-helper"), "provision-helper")
	helper := func(name string) *activities.HelperRunner {
		return &activities.HelperRunner{
			Command: []string{"docker", "run", "--rm", "-i", "--network", "none", "--read-only", "--tmpfs", "/tmp",
				"-v", dir + ":/helper:ro", "--entrypoint", "/helper/" + name, composeImage},
			Timeout: 2 * time.Minute,
			Env:     []string{"DOCKER_HOST", "HOME"},
		}
	}

	// what the helper step sends: an ed25519 key, a CSR, the inventory
	const identity = "ruby.demo.example"
	pub, _, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	csrKey, err := rsa.GenerateKey(rand.Reader, 2048) // what go-choria's gencsr makes
	require.NoError(t, err)
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: identity}}, csrKey)
	require.NoError(t, err)
	in := activities.HelperInput{
		Identity:      identity,
		ED25519PubKey: &activities.ED25519Result{PublicKey: hex.EncodeToString(pub), Directory: "/etc/choria"},
		CSR:           &activities.CSRResult{CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})), SSLDir: "/etc/choria/ssl"},
		Inventory:     `{"version":"0.30.2","agents":["rpcutil"]}`,
	}
	out, err := helper("provision-helper").Run(t.Context(), in)
	require.NoError(t, err)
	require.False(t, out.Defer, "the helper deferred: %s", out.Msg)
	require.Equal(t, "configured by a Ruby helper", out.Msg)
	c := out.Configuration
	require.Equal(t, identity, c["identity"])
	require.Equal(t, "false", c["plugin.choria.server.provision"])
	require.Equal(t, "/etc/choria/server.jwt", c["plugin.security.choria.token_file"])
	require.Equal(t, identity, c["x.csr_subject"], "openssl parsed the CSR")
	require.Equal(t, "0.30.2", c["x.inventory_version"], "json parsed the inventory")
	require.Equal(t, "nats://broker.example.net:4222", c["plugin.choria.middleware_hosts"], "yaml")
	sum := sha256.Sum256([]byte(identity))
	require.Equal(t, hex.EncodeToString(sum[:]), c["x.digest"], "openssl digests")
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte(identity)), c["x.base64"])
	require.Equal(t, "GET /v1/sign", c["x.request"], "net/http")
	require.Equal(t, "openssl,curl,nc,ps", c["x.tools"], "the tools the original's image gave shell helpers")
	require.NotNil(t, out.ServerClaims)
	require.NotNil(t, out.ServerClaims.ExpiresAt)
	require.True(t, out.ServerClaims.Permissions.Streams)
	t.Logf("COMPOSE: a Ruby helper (Ruby %s) ran in %s", c["x.ruby"], composeImage)

	// bad input: the helper's own answer, a defer
	out, err = helper("provision-helper").Run(t.Context(), activities.HelperInput{Inventory: "{}"})
	require.NoError(t, err)
	require.True(t, out.Defer)
	require.Contains(t, out.Msg, "no identity")

	// the originals, unchanged, when given: they run, exit 0 and answer without a Ruby failure
	// (a missing library or interpreter fails before their own rescue, or in it)
	originals := os.Getenv("PROVISIONER_ORIGINAL_HELPERS")
	if originals == "" {
		t.Log("PROVISIONER_ORIGINAL_HELPERS unset: the originals are not run (docs/deployment.md)")
		return
	}
	noCSR := in
	noCSR.CSR = nil // the chart's stock helper would ask the Kubernetes API for a certificate
	for i, src := range strings.Split(originals, ":") {
		name := fmt.Sprintf("original-%d", i)
		install(src, name)
		out, err := helper(name).Run(t.Context(), noCSR)
		require.NoError(t, err, src)
		require.NotContains(t, out.Msg, "Unexpected failure", src)
		require.False(t, out.Defer, "%s deferred: %s", src, out.Msg)
		t.Logf("COMPOSE: %s ran unchanged in %s: %q, %d configuration keys", src, composeImage, out.Msg, len(out.Configuration))
	}
}
