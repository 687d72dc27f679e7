//go:build compose

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/internal/operator"
	"github.com/choria-temporal/provisioner/workflows"
)

// The docker-compose stack for real, on the project's own Docker engine with every image built
// here (scripts/test-compose.sh starts the engine, builds the images and runs this test; it is
// not part of `go test ./...`): docker-compose up, every service in the state its role says
// (one-shots exited 0, the rest running, health checks healthy), the three demo servers
// provisioned (`choria-provisioner hosts list --json` through the published frontend port), the
// Web UI decoding a host through the codec server (Chromium), /metrics counting them, and
// docker-compose down -v leaving nothing of the project behind.
func TestComposeStack(t *testing.T) {
	env := func(k string) string {
		v := os.Getenv(k)
		require.NotEmpty(t, v, "%s is set by scripts/test-compose.sh (make test-compose)", k)
		return v
	}
	project := env("COMPOSE_PROJECT_NAME")
	temporalPort, uiPort, metricsPort := env("DEMO_TEMPORAL_PORT"), env("DEMO_UI_PORT"), env("DEMO_METRICS_PORT")
	env("DEMO_CODEC_PORT")
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
	// dependency or health check shows here
	oneShots := map[string]bool{"temporal-admin-tools": true, "temporal-create-namespace": true, "credentials": true, "setup": true}
	healthChecked := map[string]bool{"postgresql": true, "temporal": true}
	services, err := compose("config", "--services")
	require.NoError(t, err, services)
	names := strings.Fields(services)
	require.Len(t, names, 13)
	state := func(svc string) (status, health string, exit int) {
		id, err := compose("ps", "-q", svc)
		require.NoError(t, err, id)
		id = strings.TrimSpace(id)
		require.NotEmpty(t, id, "service %s has no container", svc)
		f := strings.Fields(docker("inspect", "--format", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}-{{end}} {{.State.ExitCode}}", id))
		fmt.Sscan(f[2], &exit)
		return f[0], f[1], exit
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
			ready = ready && status == "running" && (!healthChecked[svc] || health == "healthy")
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

	// the Web UI on its published port, decoding a host through the codec server
	shots := dir
	if os.Getenv("WRITE_SCREENSHOTS") != "" {
		shots = filepath.Join(root, "docs", "images")
	}
	b := newBrowser(t)
	page := fmt.Sprintf("http://127.0.0.1:%s/namespaces/default/workflows/%s/%s/history", uiPort, url.PathEscape(workflows.WorkflowID(nodes[0])), runs[nodes[0]])
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

func mustOut(t *testing.T, f func(...string) (string, error), args ...string) string {
	t.Helper()
	out, err := f(args...)
	require.NoError(t, err, out)
	return out
}
