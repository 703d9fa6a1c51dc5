package pagecachebench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// cachedPages is how many pages of the files are in the page cache.
func cachedPages(t *testing.T, files []string) (n uint64) {
	t.Helper()
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := residentPages(int(f.Fd()))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if c < 0 {
			t.Skip("bench/pagecache: no cachestat(2) (6.5)") // not a missing tool: a kernel feature
		}
		n += uint64(c)
	}
	return n
}

// TestScanFadviseShim: db_bench's scan (seekrandom) on a small database,
// cold, leaves its pages cached without the shim and few with the shim's
// DONTNEED on what it read (by stretches: a DONTNEED of each 4 KiB
// read left half the pages, in large readahead folios); NOREUSE drops
// nothing.
func TestScanFadviseShim(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.NeedTool(t, "db_bench", "rocksdb-tools")
	testenv.NeedTool(t, "gcc", "gcc")
	ctx := context.Background()
	dir := t.TempDir()
	db, err := servers.PrepareRocksDB(ctx, servers.RocksDBOptions{CacheDir: dir, Bytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := db.Files()
	if err != nil {
		t.Fatal(err)
	}
	shim, err := fadviseShim(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, adv := range []string{"", "noreuse", "dontneed"} {
		if err := pcDrop(files); err != nil {
			t.Fatal(err)
		}
		cmd, err := db.Command(ctx, servers.DBBenchRun{Benchmark: "seekrandom", Duration: time.Second, SeekNexts: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if adv != "" {
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+shim, "CISTERN_SCAN_FADVISE="+adv)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", adv, err, out)
		}
		if strings.Contains(string(out), "ERROR: ld.so") {
			t.Fatalf("%s: the shim did not load:\n%s", adv, out)
		}
		got[adv] = cachedPages(t, files)
		t.Logf("fadvise %q: %d pages cached after the scan", adv, got[adv])
	}
	if got[""] < 1024 {
		t.Fatalf("the scan without advice left only %d pages cached", got[""])
	}
	// What stays: each file's last stretch (under 512 KiB, advised when
	// the reader moves on) and the readahead not yet read when the scan
	// ended: up to a fifth of a 1 s scan's pages.
	if got["dontneed"] > got[""]/4 {
		t.Errorf("DONTNEED after each read left %d pages cached (without: %d)", got["dontneed"], got[""])
	}
	if got["noreuse"] < 1024 { // how much a 1 s scan reads varies: no ratio
		t.Errorf("NOREUSE left %d pages cached: it should not drop pages", got["noreuse"])
	}
}

// TestRocksDBPlot draws the plot from a report with some parts missing.
func TestRocksDBPlot(t *testing.T) {
	rep := benchkit.New("pagecache", true)
	for _, m := range rdbReadModes {
		rep.Sample("rocksdb_reads/"+m, "ops_per_sec", 1000)
	}
	rep.Sample("percgroup/default", "search_seconds", 10)
	rep.Sample("percgroup/tailored", "search_seconds", 5)
	path := filepath.Join(t.TempDir(), "p.png")
	if err := rdbPlot(rep, path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
		t.Fatalf("plot: %v", err)
	}
}

// TestPagecachePlotZipf draws the zipf part alone (it drew nothing, and
// the command said it wrote the file) and the search beside it.
func TestPagecachePlotZipf(t *testing.T) {
	for _, parts := range [][]string{{"zipf"}, {"zipf", "search"}} {
		rep := benchkit.New("pagecache", true)
		for _, part := range parts {
			for _, m := range []string{"default", "agent_wtinylfu", "agent_auto", "agent_mru"} {
				rep.Sample(part+"/"+m, "ops_per_sec", 1000)
				rep.Sample(part+"/"+m, "seconds", 2)
			}
		}
		path := filepath.Join(t.TempDir(), "p.png")
		if err := pcPlot(rep, path); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
			t.Fatalf("%v: plot: %v", parts, err)
		}
	}
}
