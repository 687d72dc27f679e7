// Package procstat reads a process's CPU time and peak memory from Linux's /proc, for the
// benchmark and the tests that report what each component cost.
package procstat

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// tick is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const tick = 10 * time.Millisecond

// stat is what matters of /proc/<pid>/stat.
type stat struct {
	pid, ppid int
	ticks     int64 // utime + stime + cutime + cstime: the process and its reaped children
}

func read(file string) (stat, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return stat{}, false
	}
	// "pid (comm) state ppid ... utime stime cutime cstime ...": comm may hold spaces and parens
	lp, rp := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if lp < 0 || rp < lp {
		return stat{}, false
	}
	fields := strings.Fields(string(b[rp+1:]))
	if len(fields) < 15 {
		return stat{}, false
	}
	s := stat{}
	s.pid, _ = strconv.Atoi(strings.TrimSpace(string(b[:lp])))
	s.ppid, _ = strconv.Atoi(fields[1])
	for _, v := range fields[11:15] {
		n, _ := strconv.ParseInt(v, 10, 64)
		s.ticks += n
	}
	return s, s.pid != 0
}

// CPU is the user and system CPU time of a process and of its children that have exited.
func CPU(pid int) time.Duration {
	s, _ := read("/proc/" + strconv.Itoa(pid) + "/stat")
	return time.Duration(s.ticks) * tick
}

// TreeCPU is CPU of a process and all its descendants, live or exited (PostgreSQL's backends,
// say, are the postmaster's children in sessions of their own, so a process group misses them).
func TreeCPU(root int) time.Duration {
	var sum int64
	for _, s := range tree(root) {
		sum += s.ticks
	}
	return time.Duration(sum) * tick
}

// tree is a process and its live descendants, read from /proc at once.
func tree(root int) []stat {
	if root == 0 {
		return nil
	}
	files, _ := filepath.Glob("/proc/[0-9]*/stat")
	children := map[int][]int{}
	all := map[int]stat{}
	for _, f := range files {
		if s, ok := read(f); ok {
			children[s.ppid] = append(children[s.ppid], s.pid)
			all[s.pid] = s
		}
	}
	var out []stat
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		if s, ok := all[queue[0]]; ok {
			out = append(out, s)
		}
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// PeakRSSMiB is a process's peak resident set (VmHWM) in MiB, 0 when unknown.
func PeakRSSMiB(pid int) float64 { return statusMiB(pid, "VmHWM:") }

// RSSMiB is a process's resident set now (VmRSS) in MiB, 0 when unknown.
func RSSMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

func statusMiB(pid int, field string) float64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

// TreePSSMiB is the proportional set size (smaps_rollup's Pss) of a process and its live
// descendants, in MiB: memory they share (PostgreSQL's shared buffers) counted once, split
// between them, where summing their RSS would count it once per backend.
func TreePSSMiB(root int) float64 {
	var kb float64
	for _, s := range tree(root) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(s.pid) + "/smaps_rollup")
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Pss:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					n, _ := strconv.ParseFloat(f[0], 64)
					kb += n
				}
				break
			}
		}
	}
	return kb / 1024
}
