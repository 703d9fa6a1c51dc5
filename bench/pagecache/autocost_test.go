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

// TestAutoCostOfTwoAutos: per-cgroup measures its two autos' cost as one
// figure (they share the bench process) and beside it each one's own
// parts, under its key. Two real autos on two cgroups, one of them read
// through: the shared figure counts at least both autos' BPF run time,
// and the read cgroup's sampler ran. (The idle one's programs run too:
// tracepoints fire on every read in the system and filter by cgroup
// inside, so each auto's BPF also runs on the other cgroup's reads.)
func TestAutoCostOfTwoAutos(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	path, err := pcDataFile(dir, "data", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var autos []*pagecache.Auto
	var cgs []string
	for i := range 2 {
		a, cg, stop, err := startAuto(ctx, pagecache.Config{Dir: dir, Cgroup: fmt.Sprintf("cistern-test-autocost-%d-%d", os.Getpid(), i), Limit: 16 << 20}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		defer stop()
		autos = append(autos, a)
		cgs = append(cgs, cg.Path)
	}
	cost, err := startAutoCost(autos...)
	if err != nil {
		t.Fatal(err)
	}
	cost.keys = []string{"read_", "idle_"}
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
	if err := cost.finish(rep, "p/agent_auto", nil); err != nil {
		t.Fatal(err)
	}
	get := func(k string) float64 {
		v := rep.Samples("p/agent_auto", k)
		if len(v) != 1 {
			t.Fatalf("%s: %v, want one sample", k, v)
		}
		return v[0]
	}
	all, bpf := get("auto_cpu_share_pct"), get("auto_bpf_share_pct")
	rb, ib := get("read_auto_bpf_share_pct"), get("idle_auto_bpf_share_pct")
	t.Logf("%.0f GETs/s: both autos %.2f %% of a core (BPF %.3f %%: read %.3f %%, idle %.3f %%; shadows %.2f, %.2f %%)",
		r[0], all, bpf, rb, ib, get("read_auto_shadow_share_pct"), get("idle_auto_shadow_share_pct"))
	if rb <= 0 {
		t.Errorf("the read cgroup's sampler ran for no time (%.3f %%)", rb)
	}
	if bpf < rb+ib-1e-9 || all < bpf {
		t.Errorf("shared figure %.3f %% (BPF %.3f %%) below its parts %.3f + %.3f %%", all, bpf, rb, ib)
	}
}
