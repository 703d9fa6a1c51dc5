package pagecachebench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/pagecache"
)

// TestAutoCostOfTwoAutoChildren: per-cgroup runs an auto per cgroup,
// each in a process of its own, and measures each one's cost on its own
// under its key. Two real autos on two cgroups, one of them read through:
// the read one's sampler ran in the reader's thread, each figure counts
// at least its own BPF run time, both end with their cgroups removed.
// (The idle one's programs run too: tracepoints fire on every read in
// the system and filter by cgroup inside.)
func TestAutoCostOfTwoAutoChildren(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	path, err := pcDataFile(dir, "data", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	children := map[string]*autoChild{}
	var cgs []string
	for i, key := range []string{"read_", "idle_"} {
		var logged []string
		c, err := startAutoChild(ctx, pagecache.Config{Dir: dir, Cgroup: fmt.Sprintf("cistern-test-autocost-%d-%d", os.Getpid(), i), Limit: 16 << 20}, func(p string) { logged = append(logged, p) })
		if err != nil {
			t.Fatal(err)
		}
		defer c.finish(nil, "", "", false)
		if c.cmd.Process.Pid == os.Getpid() {
			t.Fatal("auto child runs in the test's process")
		}
		children[key] = c
		cgs = append(cgs, c.cg.Path)
	}
	var cost childCostRun
	cost.start(children)
	// Reads in the first cgroup only: the test binary's child reads the
	// file from there (a process's reads are its cgroup's).
	if err := pcDrop([]string{path}); err != nil {
		t.Fatal(err)
	}
	r, err := runGetScan(ctx, "default", nil, cgs[0], path, path, 1, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := benchkit.New("t", true)
	if err := cost.end(rep, "p/agent_auto", nil); err != nil {
		t.Fatal(err)
	}
	get := func(k string) float64 {
		v := rep.Samples("p/agent_auto", k)
		if len(v) != 1 {
			t.Fatalf("%s: %v, want one sample", k, v)
		}
		return v[0]
	}
	rc, rb, ic, ib := get("read_auto_cpu_share_pct"), get("read_auto_bpf_share_pct"), get("idle_auto_cpu_share_pct"), get("idle_auto_bpf_share_pct")
	t.Logf("%.0f GETs/s: read auto %.2f %% of a core (BPF %.3f %%), idle auto %.2f %% (BPF %.3f %%)", r[0], rc, rb, ic, ib)
	if rb <= 0 {
		t.Errorf("the read cgroup's sampler ran for no time (%.3f %%)", rb)
	}
	if rc < rb || ic < ib {
		t.Errorf("a figure below its own BPF run time: read %.3f < %.3f or idle %.3f < %.3f", rc, rb, ic, ib)
	}
	if b := get("read_auto_cost_bound"); b != 1-rc/100 {
		t.Errorf("read_auto_cost_bound %.4f, want 1 - %.4f", b, rc/100)
	}
	for key, c := range children {
		if err := c.finish(rep, "p/agent_auto", key, true); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if len(rep.Samples("p/agent_auto", key+"auto_ran_policy")) != 1 {
			t.Errorf("%s: no auto_ran_policy recorded", key)
		}
	}
	for _, cg := range cgs {
		if _, err := os.Stat(cg); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind (%v)", cg, err)
		}
	}
}
