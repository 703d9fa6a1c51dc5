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
// go-ycsb's output parsed, pages loaded counted, C traced and replayed (OPT
// no worse than the kernel model), and the loaded database left as it was
// (the updates went to the clone).
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
