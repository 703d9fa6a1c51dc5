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

	"github.com/cistern-ebpf/cistern/evict/sim"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/pagecache"
	"github.com/cistern-ebpf/cistern/pagecache/pctrace"
)

// TestYCSBRun: go-ycsb loads a tiny database (20k records), then runs
// workload A (reads and updates, scrambled zipfian) and C on a clone in a
// memory cgroup through the bench's own ycsbRun: operations measured,
// go-ycsb's output parsed, pages loaded counted, C traced and replayed (OPT
// no worse than the kernel model), and the loaded database left as it was
// (the updates went to the clone).
func TestYCSBRun(t *testing.T) {
	ctx := context.Background()
	db, dir := ycsbTestDB(t, ctx)
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
		var tr *tracer
		if name == "c" { // the traced mode's path: the recorder on the clone
			if tr, err = startTrace(ctx, dir, clone, cg.Path); err != nil {
				t.Fatal(err)
			}
		}
		r, err := ycsbRun(ctx, servers.YCSBRun{Dir: clone, Records: db.Records, Props: w.Props, Threads: 2, Cgroup: cg.Path}, 2*time.Second*testenv.TimeScale(), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tr != nil {
			evs, err := tr.finish()
			if err != nil {
				t.Fatal(err)
			}
			rep := benchkit.New("pagecache", true)
			h, err := sampleHeadroom(rep, "ycsb_c/traced", evs, 0, float64(r.res.Ops["TOTAL"].Count))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("c traced: %d events; kernel model %d misses, OPT %d, best %s (cache %d pages)", len(evs), h.Kernel.Misses, h.OPT.Misses, h.Best, h.CapacityPages)
			if h.OPT.Misses == 0 || h.OPT.Misses > h.Kernel.Misses {
				t.Errorf("c traced: OPT %d misses against the kernel model's %d", h.OPT.Misses, h.Kernel.Misses)
			}
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

// TestYCSBAgentCountsAddsAsTheTrace runs workload A (half updates: WAL
// appends and memtable flushes add pages no read asked for) under an LFU
// agent, with the access-trace recorder on the same cgroup and files, as
// the bench's warm-up and measured go-ycsb processes: the agent's own
// count of pages added over the measured run (what ycsb_W_live_vs_sim
// takes as live) is the count of pages the trace saw added from the event
// the measured run began at, and the trace's accesses with those adds put
// in (pctrace.AccessesAt) hold each of those pages once.
func TestYCSBAgentCountsAddsAsTheTrace(t *testing.T) {
	ctx := context.Background()
	db, dir := ycsbTestDB(t, ctx)
	files, _, err := db.Files()
	if err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(dir, "clone")
	if err := db.Clone(clone); err != nil {
		t.Fatal(err)
	}
	if err := pcDrop(files); err != nil {
		t.Fatal(err)
	}
	// 64 MiB, as TestYCSBRun: go-ycsb's own memory is charged there too.
	a, cg, stop, err := rdbAgent(ctx, clone, fmt.Sprintf("cistern-test-ycsb-adds-%d", os.Getpid()), 64<<20, "lfu", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); pcClose(a, cg) }()
	tr, err := startTrace(ctx, dir, clone, cg.Path)
	if err != nil {
		t.Fatal(err)
	}
	w := YCSBWorkloads[slices.IndexFunc(YCSBWorkloads, func(w YCSBWorkload) bool { return w.Name == "a" })]
	run := servers.YCSBRun{Dir: clone, Records: db.Records, Props: w.Props, Threads: 2, Cgroup: cg.Path}
	if _, err := ycsbRun(ctx, run, time.Second*testenv.TimeScale(), nil); err != nil {
		tr.finish()
		t.Fatalf("warm-up: %v", err)
	}
	at := tr.events()
	r, err := ycsbRun(ctx, run, 2*time.Second*testenv.TimeScale(), a)
	evs, terr := tr.finish()
	if err != nil || terr != nil {
		t.Fatalf("measured run: %v; trace: %v", err, terr)
	}
	ops := float64(r.res.Ops["TOTAL"].Count)
	own := math.Round(r.ownAddsPer1k * ops / 1000)
	keys, from, s := pctrace.AccessesAt(evs, int(at), true)
	kernel := sim.Kernel(keys, int(s.MaxResident), from)
	t.Logf("%.0f ops: the agent counted %.0f pages added, the trace %d (%d outside reads) from event %d of %d; the kernel model on the trace with its adds: %d misses",
		ops, own, s.PagesLoaded, s.PagesAddedOutsideReads, at, len(evs), kernel)
	if math.IsNaN(own) || own <= 0 || s.PagesLoaded == 0 {
		t.Fatalf("nothing counted: agent %v, trace %+v", own, s)
	}
	// The agent's tracker and the recorder register the files RocksDB
	// creates (its new WAL, flushed tables) each from its own inotify
	// watch: a page added in the moment between a file's creation and one
	// watch's registration is the other's alone.
	if d := math.Abs(own/float64(s.PagesLoaded) - 1); d > 0.02 {
		t.Errorf("the agent counted %.0f pages added, the trace %d: %.1f%% apart (want within 2%%)", own, s.PagesLoaded, 100*d)
	}
	if s.PagesAddedOutsideReads == 0 {
		t.Errorf("workload A's writes added no page outside a read: %+v", s)
	}
	// The adds outside reads and the writes are in the sequence beside the
	// same reads, less the reads that were an added page's first access
	// after its add (the add was that access). (The model's misses are not bounded below by
	// them: a page written again after the agent evicted it, or read ahead
	// after it was read, can still be in the simulated cache.)
	rkeys, rfrom, _ := pctrace.AccessesAt(evs, int(at), false)
	want := int64(s.PagesAddedOutsideReads+s.PagesWritten) - int64(s.FirstReadsSkipped)
	if got := int64(len(keys)-from) - int64(len(rkeys)-rfrom); got != want {
		t.Errorf("the sequence with adds holds %d measured accesses more than the reads', want %d: %d pages added outside reads, %d written, less %d first reads", got, want, s.PagesAddedOutsideReads, s.PagesWritten, s.FirstReadsSkipped)
	}
	if s.PagesWritten == 0 {
		t.Errorf("workload A wrote no page the sequence holds: %+v", s)
	}
	if kernel == 0 || kernel > uint64(len(keys)-from) {
		t.Errorf("the kernel model missed %d of %d measured accesses", kernel, len(keys)-from)
	}
}

// ycsbTestDB loads the tests' tiny YCSB database (20k records) in a
// temporary directory, which it returns too.
func ycsbTestDB(t *testing.T, ctx context.Context) (*servers.YCSBDB, string) {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := servers.GoYCSBPath(); err != nil {
		testenv.Missing(t, "go-ycsb", fmt.Sprint(err))
	}
	testenv.NeedTool(t, "ldb", "rocksdb-tools")
	dir := t.TempDir()
	db, err := servers.PrepareYCSB(ctx, servers.YCSBDBOptions{CacheDir: dir, Records: 20000})
	if err != nil {
		t.Fatal(err)
	}
	return db, dir
}
