package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/choria-temporal/provisioner/activities"
	"github.com/choria-temporal/provisioner/internal/dev/devstack"
	"github.com/choria-temporal/provisioner/workflows"
)

// buildUpgradeRepository builds the server binary again as version, and lays it out as a
// go-updater HTTP repository: <version>/<os>/<arch>/release.json and the bzip2'd binary.
func buildUpgradeRepository(t *testing.T, version string) (repo string, binary string) {
	t.Helper()
	dir := t.TempDir()
	binary = filepath.Join(dir, "choria-provisioner-dev-"+version)
	build := exec.Command("go", "build", "-ldflags", "-X github.com/choria-io/go-choria/build.Version="+version, "-o", binary, "./cmd/choria-provisioner-dev")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	rel := filepath.Join(dir, "repo", version, runtime.GOOS, runtime.GOARCH)
	require.NoError(t, os.MkdirAll(rel, 0o755))
	b, err := os.ReadFile(binary)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	require.NoError(t, os.WriteFile(filepath.Join(rel, "choria"), b, 0o755))
	bz := exec.Command("bzip2", "-k", filepath.Join(rel, "choria"))
	out, err = bz.CombinedOutput()
	require.NoError(t, err, "bzip2 (Debian package bzip2) is needed to build the update repository: %s", out)
	spec, err := json.Marshal(map[string]string{"binary": "choria.bz2", "hash": hex.EncodeToString(sum[:])})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(rel, "release.json"), spec, 0o644))
	return filepath.Join(dir, "repo"), binary
}

// features.upgrades against what go-choria's agent really does with release_update: the server
// downloads the version the helper asks for from a local HTTP update repository, replaces its
// binary, restarts into it, and the same workflow provisions the upgraded server.
func TestIntegrationUpgradeBeforeProvisioning(t *testing.T) {
	const version = "0.99.0"
	repo, upgraded := buildUpgradeRepository(t, version)
	srv := httptest.NewServer(http.FileServer(http.Dir(repo)))
	defer srv.Close()
	t.Setenv("PROVISIONER_FEATURES__UPGRADES", "true")
	t.Setenv("PROVISIONER_UPGRADES_REPOSITORY", srv.URL)

	e := newEnv(t, envOptions{servers: 0, helper: func(s *devstack.Stack) string {
		return s.HelperCommand + " --upgrade " + version
	}})
	e.stack.Fleet.OwnBinary = true
	require.NoError(t, e.stack.Fleet.StartN(1))
	m := e.stack.Fleet.Members[0]
	e.provisioner("replica-a")
	e.waitProvisioned(120*time.Second, m)
	e.verifyServerJWT(m)
	e.runs(m.Identity, 1)

	got, err := os.ReadFile(m.Binary)
	require.NoError(t, err)
	want, err := os.ReadFile(upgraded)
	require.NoError(t, err)
	require.True(t, sha256.Sum256(got) == sha256.Sum256(want), "the server's binary was replaced by the release")

	steps := strings.Join(scheduled(e.history(m.Identity)), ",")
	require.Equal(t, 1, strings.Count(steps, activities.ReleaseUpdateName), steps)
	require.Equal(t, 2, strings.Count(steps, activities.InventoryName), "inventory again after the upgrade: %s", steps)
	d, err := e.operator().Show(t.Context(), m.Identity)
	require.NoError(t, err)
	require.Equal(t, version, d.State.Upgraded)
	require.Equal(t, version, d.State.ServerVersion, "the provisioned server runs the new version")
	require.Equal(t, workflows.OutcomeProvisioned, d.Outcome)
	e.writeReplayHistory("provision-upgrade", m.Identity)
}
