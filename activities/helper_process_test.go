package activities

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The helper's process group: nothing it starts outlives the call.

func TestHelperTimeoutKillsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	start := time.Now()
	_, err := runHelper(t, fmt.Sprintf("sleep 60 & echo $! > %s; wait", pidFile), 500*time.Millisecond)
	require.ErrorIs(t, err, ErrHelperTimeout)
	require.Less(t, time.Since(start), 10*time.Second)

	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }, 5*time.Second, 50*time.Millisecond,
		"the helper's child must die with it")
}

// A helper that answers and exits leaves nothing behind: a child it put in the background (its
// output elsewhere, so the call does not wait for it) ends with the call.
func TestHelperExitEndsItsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	out, err := runHelper(t, fmt.Sprintf(`sleep 60 >/dev/null 2>&1 </dev/null & echo $! > %s; echo '{"defer": true, "msg": "later"}'`, pidFile), 10*time.Second)
	require.NoError(t, err)
	require.True(t, out.Defer)

	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return gone(pid) }, 5*time.Second, 50*time.Millisecond, "the helper's background child must end with the call")
}

// gone is true when pid no longer runs: no such process, or a zombie nobody has reaped yet (the
// child's new parent may be an init that does not reap).
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}
