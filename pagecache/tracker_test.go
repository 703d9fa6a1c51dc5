package pagecache

import (
	"fmt"
	"github.com/cistern-ebpf/cistern/evict"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// openTracked loads policy with no cgroup filter and attaches its
// tracepoint programs to dir's files.
func openTracked(t *testing.T, policy, dir string) (*policy, *tracker) {
	t.Helper()
	row, err := evict.Lookup(policy, evict.PageCache)
	if err != nil {
		t.Fatal(err)
	}
	p, err := openPolicy(row, 1<<16, trackConfig{sample: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	tr, err := newTracker(p.coll, dir, row.Accesses, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return p, tr
}

// pcStats are the tracker's and the policy's counters together.
func pcStats(t *testing.T, p *policy, tr *tracker) map[string]uint64 {
	t.Helper()
	st, err := tr.stats()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := p.stats()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range ps {
		st[k] = v
	}
	return st
}

// TestReadSignals: both access signals apply a buffered read of a watched
// file to the policy, in the kernel, as the page range it covers:
// mm_filemap_get_pages where the kernel has it, and read/pread64, the
// variant kernels before 6.10 get. Both run here when the tracepoint
// exists. LRU counts every read of a tracked folio as a hit.
func TestReadSignals(t *testing.T) {
	testenv.RequireRoot(t)
	variants := []bool{true}
	if kernel.FilemapGetPages() == nil {
		variants = append(variants, false)
	} else {
		t.Logf("only read/pread64: %v", kernel.FilemapGetPages())
	}
	for _, sys := range variants {
		name := "mm_filemap_get_pages"
		if sys {
			name = "syscalls"
		}
		t.Run(name, func(t *testing.T) {
			syscallReads = sys
			defer func() { syscallReads = false }()
			dir := filepath.Join(t.TempDir(), "w")
			var fs unix.Statfs_t
			if err := unix.Statfs(filepath.Dir(dir), &fs); err == nil && fs.Type == unix.TMPFS_MAGIC && !sys {
				t.Skip("the temporary directory is on tmpfs, whose reads bypass mm_filemap_get_pages: set TMPDIR to a disk file system") // not a missing tool: where TMPDIR is
			}
			path := writeFiles(t, dir, 1, 64<<10)[0]
			p, tr := openTracked(t, "lru", dir)
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 8<<10)
			if _, err := f.ReadAt(buf, 16<<10); err != nil { // pread64: pages 4-5, brought in
				t.Fatal(err)
			}
			before := pcStats(t, p, tr)
			if _, err := f.ReadAt(buf, 16<<10); err != nil { // again: 2 hits (4 KiB folios) or 1
				t.Fatal(err)
			}
			st := pcStats(t, p, tr)
			t.Logf("stats before the second read %v, after %v", before, st)
			if st["added"] == 0 || st["tracked_pages"] == 0 {
				t.Fatalf("the folios the pread brought in were not applied to the policy: %v", st)
			}
			if st["events_read"] != before["events_read"]+1 || st["acc_hits"] <= before["acc_hits"] {
				t.Fatalf("the second pread of pages 4-5 was not applied as a hit: before %v, after %v", before, st)
			}
		})
	}
}

// TestWritesAreAccesses: a write that makes a cached folio of a watched
// file dirty is an access (pc_dirty): a write to a page the cache does
// not hold reads it in (its add) and dirties it, which LFU takes as the
// add's own first access; after an fsync the page is clean and cached,
// and the next write is a hit. Without it, a page appended to again and
// again was never accessed, as far as the policies knew.
func TestWritesAreAccesses(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "w")
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(dir), &fs); err == nil && fs.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose folios are dirtied without writeback_dirty_folio: set TMPDIR to a disk file system") // not a missing tool: where TMPDIR is
	}
	path := writeFiles(t, dir, 1, 16<<10)[0] // dropped from the cache
	p, tr := openTracked(t, "lfu", dir)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func() {
		t.Helper()
		if _, err := f.WriteAt([]byte("cistern"), 100); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil { // clean again: the next write dirties it anew
			t.Fatal(err)
		}
	}
	write()
	first := pcStats(t, p, tr)
	write()
	st := pcStats(t, p, tr)
	t.Logf("after the first write %v, after the second %v", first, st)
	if first["added"] == 0 || first["events_write"] == 0 || first["first_reads"] == 0 {
		t.Fatalf("the first write's folio was not added, dirtied and taken as its first access: %v", first)
	}
	if st["events_write"] != first["events_write"]+1 || st["acc_hits"] <= first["acc_hits"] {
		t.Fatalf("the second write, to a cached clean page, was not applied as a hit: before %v, after %v", first, st)
	}
}

// TestReadBatchesShareTheirRead: one read(2) calls filemap_get_pages once
// per batch of at most 31 folios, and mm_filemap_get_pages reports each call
// as the rest of the read, so a cold 4 MiB read is several events over the
// same pages. They carry one read number, so the policy counts each folio
// once per read: for LFU (the read that brings a folio in is no hit) a cold
// read is no hit at all, and a second read one hit a folio.
func TestReadBatchesShareTheirRead(t *testing.T) {
	dir := getPagesDir(t)
	path := writeFiles(t, dir, 1, 4<<20)[0]
	p, tr := openTracked(t, "lfu", dir)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Every batch but the last ends at a folio the read must wait for
	// (readahead), or after 31 folios: many batches, whatever the folio size.
	if _, err := f.ReadAt(make([]byte, 4<<20), 0); err != nil {
		t.Fatal(err)
	}
	st := pcStats(t, p, tr)
	t.Logf("after a cold read: %v", st)
	if st["events_read"] != 1 {
		t.Errorf("events_read %d: want 1 (later batches are events_read_more)", st["events_read"])
	}
	if st["acc_hits"] != 0 || st["first_reads"] == 0 {
		t.Errorf("a cold read made %d hits (first reads %d): its batches must share one read", st["acc_hits"], st["first_reads"])
	}
	if st["events_read_more"] > 0 && st["read_again"] == 0 {
		t.Errorf("%d later batches repeated no folio of the read", st["events_read_more"])
	}
	if _, err := f.ReadAt(make([]byte, 4<<20), 0); err != nil {
		t.Fatal(err)
	}
	st2 := pcStats(t, p, tr)
	t.Logf("after a second read: %v", st2)
	if hits := st2["acc_hits"]; hits != st["first_reads"] {
		t.Errorf("the second read made %d hits: want one per folio (%d)", hits, st["first_reads"])
	}
}

// TestMincoreAgreesWithCachestat: the mincore variant (kernels before 6.5)
// counts the same cached pages as cachestat(2), whole file and a range.
func TestMincoreAgreesWithCachestat(t *testing.T) {
	if kernel.Cachestat() != nil {
		t.Skipf("no cachestat(2) to compare with: %v", kernel.Cachestat()) // not a missing tool: a kernel before 6.5
	}
	path := writeFiles(t, t.TempDir(), 1, 256<<10)[0]
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, 40<<10), 100<<10); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]uint64{{0, 0}, {96 << 10, 8 << 10}, {200 << 10, 0}, {1 << 20, 0}} {
		want, err := cachestat(int(f.Fd()), r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		mincoreOnly = true
		got, err := cachestat(int(f.Fd()), r[0], r[1])
		mincoreOnly = false
		if err != nil {
			t.Fatal(err)
		}
		if got.Cache != want.Cache {
			t.Errorf("range %v: mincore %d pages, cachestat %d", r, got.Cache, want.Cache)
		}
	}
}

// TestReclaimOnAgentThreadIsReported: a delete on the agent's thread is its
// own eviction, and goes unreported, only when the kernel is not reclaiming
// memory on that thread (PF_MEMALLOC): the policy must hear of reclaim,
// whoever's allocation caused it. A reader in a cgroup smaller than its
// file plays the agent's thread: its reads make the kernel reclaim the
// file's earlier pages in its own context, and it never evicts anything.
// (On a 6.1 CI guest the agent's thread once counted 39 own deletes more
// than the pages it had evicted: reclaim on that thread.)
func TestReclaimOnAgentThreadIsReported(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "w")
	path := writeFiles(t, dir, 1, 32<<20)[0]
	p, tr := openTracked(t, "fifo", dir)
	cg, err := OpenCgroup(fmt.Sprintf("cistern-test-reclaim-%d", os.Getpid()), 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()

	// The reader waits for a line, so it is in the cgroup and named the
	// agent's thread before it reads; exec keeps its pid (one thread).
	cmd := exec.Command("sh", "-c", `read x && exec cat "$0" > /dev/null`, path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := cg.AddPID(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := p.coll.Variables["pc_self_tid"].Set(uint32(cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("\n"))
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reader: %v", err)
	}
	st, err := tr.stats()
	if err != nil {
		t.Fatal(err)
	}
	left := cached(t, path)
	t.Logf("stats: %v, limit hits %d, %d pages still cached", st, cg.LimitHits(), left)
	if left >= 32<<20/4096 {
		t.Fatalf("the whole file stayed cached in an 8 MiB cgroup: no reclaim to test")
	}
	if st["events_del_own"] != 0 {
		t.Errorf("%d deletes by reclaim on the agent's thread were taken for its own evictions", st["events_del_own"])
	}
	if st["events_del"] == 0 {
		t.Errorf("reclaim on the agent's thread was not reported: %v", st)
	}
}

// getPagesDir is a directory for a test of reads batched by
// mm_filemap_get_pages (6.10+): skipped where the kernel reports read(2)
// calls instead, or where TMPDIR is on tmpfs, whose reads bypass it.
func getPagesDir(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	if err := kernel.FilemapGetPages(); err != nil {
		t.Skipf("read/pread64 only (one event per read): %v", err) // not a missing tool: a kernel before 6.10
	}
	dir := filepath.Join(t.TempDir(), "w")
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(dir), &fs); err == nil && fs.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose reads bypass mm_filemap_get_pages: set TMPDIR to a disk file system") // not a missing tool: where TMPDIR is
	}
	return dir
}
