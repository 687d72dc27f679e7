package style

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// faultTargets are the Makefile's targets that pipe go test through grep to keep their output
// short.
var faultTargets = []string{"test-faults", "test-faults-scale", "test-faults-full", "test-faults-slow",
	"test-faults-postgres", "test-faults-disk", "test-soak"}

// Every fault target exits non-zero when a scenario fails: the status of go test, not of the grep
// its output goes through. A stand-in for go test fails a scenario; make runs each target with
// it, and nothing else (-o: its prerequisites are taken as made).
func TestFaultTargetsFailWhenAScenarioFails(t *testing.T) {
	mk, err := exec.LookPath("make")
	require.NoError(t, err, "make runs the repository's targets")
	fake := filepath.Join(t.TempDir(), "go-test")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho '--- FAIL: TestIntegrationFaultStandIn (1.00s)'\necho FAIL\nexit 1\n"), 0o755))
	for _, target := range faultTargets {
		cmd := exec.Command(mk, "-s", "-C", "../..", "-o", "deps", "-o", "tools", target, "GO_TEST="+fake)
		out, err := cmd.CombinedOutput()
		require.Contains(t, string(out), "--- FAIL: TestIntegrationFaultStandIn", "%s ran the stand-in", target)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s exited 0 on a failed scenario:\n%s", target, out)
		require.NotZero(t, exit.ExitCode(), target)
	}
}

// ... and 0 when every scenario passes (the grep alone would fail on no line).
func TestFaultTargetsPassWhenEveryScenarioPasses(t *testing.T) {
	mk, err := exec.LookPath("make")
	require.NoError(t, err)
	fake := filepath.Join(t.TempDir(), "go-test")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho '--- PASS: TestIntegrationFaultStandIn (1.00s)'\necho ok\n"), 0o755))
	for _, target := range faultTargets {
		out, err := exec.Command(mk, "-s", "-C", "../..", "-o", "deps", "-o", "tools", target, "GO_TEST="+fake).CombinedOutput()
		require.NoError(t, err, "%s: %s", target, out)
		require.True(t, strings.Contains(string(out), "--- PASS"), target)
	}
}
