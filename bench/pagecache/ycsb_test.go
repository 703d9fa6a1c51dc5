package pagecachebench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/pagecache"
)

// TestYCSBRun: go-ycsb loads a tiny database (20k records), then runs
// workload A (reads and updates, scrambled zipfian) and C on a clone in a
// memory cgroup through the bench's own ycsbRun: operations measured,
// go-ycsb's output parsed, pages loaded counted, and the loaded database
// left as it was (the updates went to the clone).
func TestYCSBRun(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := servers.GoYCSBPath(); err != nil {
		testenv.Missing(t, "go-ycsb", fmt.Sprint(err))
	}
	testenv.NeedTool(t, "ldb", "rocksdb-tools")
	ctx := context.Background()
	dir := t.TempDir()
	db, err := servers.PrepareYCSB(ctx, servers.YCSBDBOptions{CacheDir: dir, Records: 20000})
	if err != nil {
		t.Fatal(err)
	}
	files, size, err := db.Files()
	if err != nil || len(files) == 0 || size < 10<<20 {
		t.Fatalf("table files %v, %d bytes, %v: want about 20 MiB", files, size, err)
	}
	again, err := servers.PrepareYCSB(ctx, servers.YCSBDBOptions{CacheDir: dir, Records: 20000})
	if err != nil || again.Dir != db.Dir {
		t.Fatalf("second prepare: %v %v", again, err)
	}
	cg, err := pagecache.OpenCgroup(fmt.Sprintf("cistern-test-ycsb-%d", os.Getpid()), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	clone := filepath.Join(dir, "clone")
	for _, name := range []string{"a", "c"} {
		w := YCSBWorkloads[slices.IndexFunc(YCSBWorkloads, func(w YCSBWorkload) bool { return w.Name == name })]
		if err := db.Clone(clone); err != nil {
			t.Fatal(err)
		}
		if err := pcDrop(files); err != nil {
			t.Fatal(err)
		}
		r, err := ycsbRun(ctx, servers.YCSBRun{Dir: clone, Records: db.Records, Props: w.Props, Threads: 2, Cgroup: cg.Path}, 2*time.Second*testenv.TimeScale(), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		total, read := r.res.Ops["TOTAL"], r.res.Ops["READ"]
		t.Logf("%s: %d ops, %.0f ops/s, read P99 %.0f µs, %.0f pages loaded per 1000 ops; %v", name, total.Count, total.OpsPerSec, read.P99, r.loadsPer1k, r.res.Ops)
		if total.Count <= 0 || total.OpsPerSec <= 0 || read.Count <= 0 || read.P99 <= 0 || read.P99 < read.P50 {
			t.Errorf("%s: implausible result %+v", name, r.res.Ops)
		}
		if name == "a" && r.res.Ops["UPDATE"].Count <= 0 {
			t.Errorf("a: no updates measured: %v", r.res.Ops)
		}
		// Every round starts cold: the reads load pages into the cgroup.
		if math.IsNaN(r.loadsPer1k) || r.loadsPer1k <= 0 {
			t.Errorf("%s: pages loaded per 1000 ops %v: want > 0 (cgroup v1's pgpgin)", name, r.loadsPer1k)
		}
	}
	after, size2, err := db.Files()
	if err != nil || !slices.Equal(after, files) || size2 != size {
		t.Fatalf("the loaded database changed: %d files of %d bytes, was %d of %d (%v)", len(after), size2, len(files), size, err)
	}
}

// TestYCSBTargets: without a simulation no headroom target is judged (the
// config says so, the JSON has null figures); with one, the policies that
// save >= 15% of the default model's misses get the speedup and P99
// targets, and without such a policy auto is named (not yet run).
func TestYCSBTargets(t *testing.T) {
	modes := ycsbModes
	fill := func(rep *benchkit.Report) {
		for _, m := range modes {
			rep.Sample("ycsb_c/"+m, "ops_per_sec", 1000)
			rep.Sample("ycsb_c/"+m, "p99_us", 100)
		}
		for _, m := range modes[1:] {
			rep.PairedRatio("ycsb_c_speedup_"+m[len("agent_"):], "ycsb_c/"+m, "ops_per_sec", "ycsb_c/default", "ops_per_sec")
			rep.PairedRatio("ycsb_c_p99_vs_default_"+m[len("agent_"):], "ycsb_c/"+m, "p99_us", "ycsb_c/default", "p99_us")
		}
	}
	rep := benchkit.New("pagecache", true)
	fill(rep)
	ycsbTargets(rep, "ycsb_c", modes, nil)
	if n := len(rep.Targets()); n != 0 {
		t.Fatalf("no simulation: %d targets judged: %+v", n, rep.Targets())
	}
	if v, ok := rep.Get("ycsb_c/agent_lfu", "sim_misses_per_1000"); !ok || !math.IsNaN(v.(float64)) {
		t.Fatalf("no simulation: sim_misses_per_1000 = %v %v, want NaN (null in the JSON)", v, ok)
	}
	rep = benchkit.New("pagecache", true)
	fill(rep)
	ycsbTargets(rep, "ycsb_c", modes, &YCSBSim{MissesPer1000: map[string]float64{"default": 100, "lfu": 80, "s3fifo": 90, "lhd": 85}, OPTMissesPer1000: 50})
	var names []string
	for _, tg := range rep.Targets() {
		names = append(names, tg.Name)
		if tg.Pass { // equal ops/s: 1.0 < 1.2, and P99 1.0 > 0.8
			t.Errorf("%s passed on equal figures", tg.Name)
		}
	}
	want := []string{"ycsb_c_speedup_lfu", "ycsb_c_p99_vs_default_lfu", "ycsb_c_speedup_lhd", "ycsb_c_p99_vs_default_lhd"}
	if !slices.Equal(names, want) {
		t.Fatalf("targets %v, want %v", names, want)
	}
	if v, _ := rep.Get("ycsb_c/agent_s3fifo", "opt_misses_per_1000"); v != 50.0 {
		t.Errorf("opt_misses_per_1000 = %v", v)
	}
	rep = benchkit.New("pagecache", true)
	fill(rep)
	ycsbTargets(rep, "ycsb_c", modes, &YCSBSim{MissesPer1000: map[string]float64{"default": 100, "lfu": 95, "s3fifo": 90, "lhd": 99}, OPTMissesPer1000: 50})
	if n := len(rep.Targets()); n != 0 {
		t.Fatalf("no headroom and no auto mode: %d targets judged", n)
	}
}
