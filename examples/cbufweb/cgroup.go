package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUGroup is a cgroup that counts the CPU time of every process put in it
// (and of their children, also after they exit): cpuacct on cgroup v1,
// cpu.stat on v2.
type CPUGroup struct {
	dir, procs string
	v2         bool
}

// NewCPUGroup creates the group name (root).
func NewCPUGroup(name string) (*CPUGroup, error) {
	if st, err := os.Stat("/sys/fs/cgroup/cpuacct"); err == nil && st.IsDir() {
		d := filepath.Join("/sys/fs/cgroup/cpuacct", name)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return nil, fmt.Errorf("cpu accounting group: %w", err)
		}
		return &CPUGroup{dir: d, procs: filepath.Join(d, "cgroup.procs")}, nil
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		d := filepath.Join("/sys/fs/cgroup", name)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return nil, fmt.Errorf("cpu accounting group: %w", err)
		}
		return &CPUGroup{dir: d, procs: filepath.Join(d, "cgroup.procs"), v2: true}, nil
	}
	return nil, fmt.Errorf("no cgroup cpu accounting (neither /sys/fs/cgroup/cpuacct nor cgroup v2)")
}

// Usage is the CPU time the group's processes used so far.
func (g *CPUGroup) Usage() time.Duration {
	if !g.v2 {
		b, _ := os.ReadFile(filepath.Join(g.dir, "cpuacct.usage"))
		ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns)
	}
	b, _ := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "usage_usec" {
			us, _ := strconv.ParseInt(f[1], 10, 64)
			return time.Duration(us) * time.Microsecond
		}
	}
	return 0
}

// Remove deletes the group once its processes are gone.
func (g *CPUGroup) Remove() {
	for i := 0; i < 100; i++ {
		if err := os.Remove(g.dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
