package benchkit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SelfCPU is this process's user+system CPU time so far.
func SelfCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcStat is the fields of /proc/PID/stat after the command's name: the
// state first (nil if pid is gone).
func ProcStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return nil
	}
	return strings.Fields(string(b[i+2:]))
}

// ProcCPU is pid's utime+stime (0 if it is gone).
func ProcCPU(pid int) time.Duration {
	f := ProcStat(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / time.Duration(ClockTick())
}

// SystemCPU is the machine's busy CPU time so far (all CPUs, /proc/stat,
// idle and iowait left out): on a 2-core box the load generator, the
// server and the BPF programs share the cores, so CPU per operation is the
// fair cost measure.
func SystemCPU() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line := strings.SplitN(string(data), "\n", 2)[0]
	f := strings.Fields(line)
	var busy uint64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseUint(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / time.Duration(ClockTick())
}

// SoftirqCPU is the machine's softirq time so far (/proc/stat), where XDP,
// TC and the network stack run.
func SoftirqCPU() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
	if len(f) <= 7 {
		return 0
	}
	si, _ := strconv.ParseUint(f[7], 10, 64)
	return time.Duration(si) * time.Second / time.Duration(ClockTick())
}

// ClockTick is the kernel's USER_HZ (getconf CLK_TCK, asked once; 100 if
// unknown).
var ClockTick = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
})

// FirstLine is s up to its first newline.
func FirstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
