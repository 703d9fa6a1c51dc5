package servers_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestRocksDBBuildAndRead builds a small database with Debian's db_bench,
// checks that a second Prepare reuses it (the marker), and runs a skewed
// readrandom and a seekrandom scan on it read-only, parsing ops/s and P99.
func TestRocksDBBuildAndRead(t *testing.T) {
	if _, err := servers.DBBenchPath(); err != nil {
		testenv.Missing(t, "db_bench", fmt.Sprint(err))
	}
	ctx := context.Background()
	dir := t.TempDir()
	opt := servers.RocksDBOptions{CacheDir: dir, Bytes: 16 << 20}
	db, err := servers.PrepareRocksDB(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	files, size, err := db.Files()
	if err != nil || len(files) == 0 || size < 12<<20 {
		t.Fatalf("table files %v, %d bytes, %v: want about 16 MiB", files, size, err)
	}
	built, _ := os.Stat(files[0])
	again, err := servers.PrepareRocksDB(ctx, opt)
	if err != nil || again.Dir != db.Dir {
		t.Fatalf("second prepare: %v %v", again, err)
	}
	if st, err := os.Stat(files[0]); err != nil || !st.ModTime().Equal(built.ModTime()) {
		t.Fatalf("second prepare rebuilt the database (%v)", err)
	}
	for _, run := range []servers.DBBenchRun{
		{Benchmark: "readrandom", Threads: 2, Duration: time.Second, ExpRange: 10},
		{Benchmark: "seekrandom", Threads: 1, Duration: time.Second, SeekNexts: 1000},
	} {
		cmd, err := db.Command(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", run.Benchmark, err, out)
		}
		for _, flag := range []string{"--mmap_read=false", "--use_direct_reads=false", "--readonly=1"} {
			if !strings.Contains(strings.Join(cmd.Args, " "), flag) {
				t.Errorf("%s: %s missing from %v", run.Benchmark, flag, cmd.Args)
			}
		}
		r, err := servers.ParseDBBench(string(out), run.Benchmark)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.0f ops/s, P50 %.1f µs, P99 %.1f µs, %d ops in %.2f s", run.Benchmark, r.OpsPerSec, r.P50, r.P99, r.Ops, r.Seconds)
		if r.OpsPerSec <= 0 || r.Ops <= 0 || r.P99 <= 0 || r.P99 < r.P50 {
			t.Errorf("%s: implausible result %+v", run.Benchmark, r)
		}
		if r.MBPerSec <= 0 {
			t.Errorf("%s: no MB/s: %+v", run.Benchmark, r)
		}
		if run.Benchmark == "readrandom" && r.Found == 0 {
			t.Errorf("readrandom found no keys: %+v", r)
		}
	}
}

// TestParseDBBench reads db_bench 7.8's output format.
func TestParseDBBench(t *testing.T) {
	out := `DB path: [/x]
readrandom   :      42.581 micros/op 46871 ops/sec 3.029 seconds 141998 operations;   45.4 MB/s (73999 of 73999 found)

Microseconds per read:
Count: 141998 Average: 42.5975  StdDev: 1090.94
Min: 1  Median: 4.4763  Max: 108239
Percentiles: P50: 4.48 P75: 5.95 P99: 20.69 P99.9: 14827.86 P99.99: 51538.85
`
	r, err := servers.ParseDBBench(out, "readrandom")
	if err != nil {
		t.Fatal(err)
	}
	want := servers.DBBenchResult{Benchmark: "readrandom", OpsPerSec: 46871, MicrosPerOp: 42.581, Ops: 141998, Seconds: 3.029, P50: 4.48, P99: 20.69, P999: 14827.86, MBPerSec: 45.4, Found: 73999}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	if _, err := servers.ParseDBBench(out, "seekrandom"); err == nil {
		t.Fatal("a missing benchmark parsed")
	}
}
