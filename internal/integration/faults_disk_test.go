package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The dev server's disk full (make test-faults-disk; needs root to mount a tmpfs): its SQLite
// file on a tmpfs of FAULTS_DISK_SIZE (256m), a burst of FAULTS_DISK_HOSTS (500) simulated hosts;
// once a quarter are configured the rest of the tmpfs is filled for FAULTS_DISK_FULL (30 s), then
// the filler is removed. Reports what was configured while the disk was full and the recovery
// from the moment space returned.
func TestIntegrationFaultDiskFull(t *testing.T) {
	if os.Getenv("FAULTS_DISK") == "" {
		t.Skip("dev server's disk full: make test-faults-disk (FAULTS_DISK=1)")
	}
	began := time.Now()
	hosts := envInt(t, "FAULTS_DISK_HOSTS", 500)
	full := envDuration(t, "FAULTS_DISK_FULL", 30*time.Second)
	size := os.Getenv("FAULTS_DISK_SIZE")
	if size == "" {
		size = "256m"
	}
	disk := mountTmpfs(t, size)
	e := newEnv(t, envOptions{ownTemporal: true, persist: true, dbFile: filepath.Join(disk, "temporal.db")})
	status := e.startFleetSim(hosts, "--prefix", "disk-")
	e.processProvisioner("replica-a")
	e.simWait(status, hosts/4, 5*time.Minute, "configured", configured)

	atFull := simCount(status(), configured)
	filler, filled := fillDisk(t, disk)
	t.Logf("disk full with %d of %d configured (%d MiB of filler)", atFull, hosts, filled>>20)
	time.Sleep(full)
	whileFull := simCount(status(), configured) - atFull
	require.NoError(t, os.Remove(filler))
	back := time.Now()
	t.Logf("space back after %v: %d hosts were configured while the disk was full; the provisioner's warnings and errors so far: %v",
		full, whileFull, e.logMessages("replica-a", `"level":"warn"`, `"level":"error"`))
	r := e.simOutcome("disk-", status, hosts, back, 20*time.Minute)
	r.log(t, fmt.Sprintf("dev server's disk full for %v under load, %d simulated hosts (recovery from when space returned)", full, hosts), time.Since(began))
	r.require(t)
}

// mountTmpfs mounts a tmpfs of size on a directory of the test's own, unmounted at its end
// (after the stack's cleanup, which was registered later).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "mounting a tmpfs (the full-disk scenario needs root): %s", out)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file into dir until the filesystem has no space left, and returns its path
// and size.
func fillDisk(t *testing.T, dir string) (string, int64) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return path, n
		}
		require.NoError(t, err, "filling %s", dir)
	}
}

// logMessages counts a replica's log lines of each level given by message.
func (e *env) logMessages(replica string, levels ...string) map[string]int {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.stack.Opts.Dir, replica+".log"))
	require.NoError(e.t, err)
	out := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		var line struct {
			Msg string `json:"msg"`
		}
		for _, lv := range levels {
			if strings.Contains(l, lv) && json.Unmarshal([]byte(l), &line) == nil {
				out[line.Msg]++
			}
		}
	}
	return out
}
