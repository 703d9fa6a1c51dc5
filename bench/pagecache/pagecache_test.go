package pagecachebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/pagecache"
)

// TestGetScanWorkloadRuns runs the GET-SCAN workload's child processes
// (this test binary re-executed) for a moment, with the agent and
// without, and checks that every mode reports GETs and scanned bytes (not
// how fast: performance lives in `cistern bench pagecache`). The limit
// leaves room for the children themselves (Go processes, charged too).
func TestGetScanWorkloadRuns(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	hot, err := pcDataFile(dir, "hot", 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	scan, err := pcDataFile(dir, "scan", 96<<20)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cistern-test-bench-pc-%d", os.Getpid())
	for _, mode := range []string{"default", "agent_get_scan", "fadvise_dontneed"} {
		var a *pagecache.Agent
		var cg *pagecache.Cgroup
		stop := func() {}
		if mode == "agent_get_scan" {
			a, err = pagecache.Start(pagecache.Config{Dir: dir, Cgroup: name, Limit: 64 << 20, Policy: "get-scan", AccessSample: 16})
			if a != nil {
				cg = a.Cgroup()
				stop = runAgent(context.Background(), a)
			}
		} else {
			cg, err = pagecache.OpenCgroup(name, 64<<20)
		}
		if err != nil {
			t.Fatal(err)
		}
		var declare func(int) error
		if a != nil {
			declare = a.AddScanPID
		}
		r, err := runGetScan(context.Background(), mode, declare, cg.Path, hot, scan, 1, 500*time.Millisecond, nil)
		stop()
		if cerr := pcClose(a, cg); cerr != nil {
			t.Error(cerr)
		}
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if r[0] <= 0 || r[1] <= 0 || r[2] <= 0 || r[3] <= 0 || r[4] <= 0 {
			t.Errorf("%s: get ops/s %.0f, p99 %.1f µs, scan MB/s %.1f, mean %.1f µs, GET CPU %.2f", mode, r[0], r[1], r[2], r[3], r[4])
		}
		// The mean is over the same GETs the rate counts: one GET thread
		// spends at most its time in them.
		if r[3]*r[0] > 1.01e6 {
			t.Errorf("%s: mean GET %.1f µs at %.0f GETs/s exceeds the thread's time", mode, r[3], r[0])
		}
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", name)); err == nil {
			t.Errorf("%s: cgroup left behind", mode)
		}
	}
}

// TestOverheadMeasuresAgentCost runs one fio run with the no-op agent: the
// agent's cost must be measured within the run (BPF run time and its
// thread's CPU, both nonzero: the warm-up's adds reach it) and small beside
// fio's own CPU.
func TestOverheadMeasuresAgentCost(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.NeedTool(t, "fio", "fio")
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	dir := t.TempDir()
	path, err := pcDataFile(dir, "data", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runOverhead(context.Background(), "agent_lru", dir, path, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cpu %v agent %v bpf %v ios %.0f", r.cpu, r.agent, r.bpf, r.ios)
	if r.ios <= 0 || r.bpf <= 0 || r.agent <= 0 || r.agent+r.bpf >= r.cpu {
		t.Errorf("cpu %v, agent thread %v, bpf %v, %v I/Os: want the agent's parts measured and below the total", r.cpu, r.agent, r.bpf, r.ios)
	}
}

// TestRAMDisk mounts the getscan RAM disk, writes a data file on it and
// takes it down again.
func TestRAMDisk(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "mnt")
	undo, err := pcRAMDisk(dir, 16<<20)
	if err != nil {
		t.Skipf("skipped: no loop device here: %v", err) // not a missing tool: a machine (container) without loop devices
	}
	if _, err := pcDataFile(dir, "f", 8<<20); err != nil {
		t.Error(err)
	}
	undo()
	if _, err := os.Stat(filepath.Join(dir, "f")); err == nil {
		t.Error("the file system is still mounted after undo")
	}
}
