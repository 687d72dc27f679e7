package service

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// hardenProcess keeps this process's secrets from the programs it starts (the helper) and from
// other processes of its user. Non-dumpable, /proc/<pid>/environ and /proc/<pid>/mem of the
// provisioner are root's, so a helper running as the same user cannot read the keys it took from
// the environment (PROVISIONER_CODEC_KEY, the Temporal API key) nor its memory, and cannot
// ptrace it. Its ambient capabilities (CAP_SETUID and CAP_SETGID, given by the service manager
// for helper_user) are cleared, so no helper inherits one: this process keeps them to switch
// the helper's user, the helper holds none.
func hardenProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("making the process non-dumpable: %w", err)
	}
	amb, err := ambientCapabilities()
	if err != nil || amb == 0 {
		return err
	}
	// capabilities are per thread: every thread's ambient set, or a helper started from a
	// thread not cleared would inherit it
	if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); errno != 0 {
		return fmt.Errorf("ambient capabilities %#x would pass to the helper and cannot be cleared (%w); start the provisioner without them (a binary built with CGO_ENABLED=0 clears them)", amb, errno)
	}
	return nil
}

// ambientCapabilities is this process's ambient capability set (CapAmb in /proc/self/status).
func ambientCapabilities() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading the process's capabilities: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapAmb:"); ok {
			var amb uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &amb); err != nil {
				return 0, fmt.Errorf("reading the process's capabilities: CapAmb %q: %w", v, err)
			}
			return amb, nil
		}
	}
	return 0, sc.Err()
}
