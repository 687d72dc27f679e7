package procstat

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOwnProcess(t *testing.T) {
	// burn some CPU in a child so that the tree has a descendant that has exited
	require.NoError(t, exec.Command("sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done").Run())
	pid := os.Getpid()
	require.Greater(t, PeakRSSMiB(pid), 1.0)
	require.Greater(t, RSSMiB(pid), 1.0)
	require.LessOrEqual(t, RSSMiB(pid), PeakRSSMiB(pid))
	// read own CPU first: the process goes on using CPU, so the later tree reading can only be larger
	own := CPU(pid)
	require.Positive(t, own)
	require.GreaterOrEqual(t, TreeCPU(pid), own)
	// a live child's memory adds to the tree's
	child := exec.Command("sleep", "30")
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	alone := TreePSSMiB(child.Process.Pid)
	require.Positive(t, alone)
	require.Greater(t, TreePSSMiB(pid), alone)
	require.Zero(t, TreePSSMiB(0))
	require.Zero(t, CPU(-1))
	require.Zero(t, PeakRSSMiB(-1))
	require.Zero(t, RSSMiB(-1))
}
