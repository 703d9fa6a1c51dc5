package pagecache

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// TestReadSignals: both access signals report a buffered read of a watched
// file as the page range it covers: mm_filemap_get_pages where the kernel
// has it, and read/pread64, the variant kernels before 6.10 get. Both run
// here when the tracepoint exists.
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
				t.Skip("the temporary directory is on tmpfs, whose reads bypass mm_filemap_get_pages: set TMPDIR to a disk file system")
			}
			path := writeFiles(t, dir, 1, 64<<10)[0]
			tr, err := openTracker(dir, 0, true, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 8<<10)
			if _, err := f.ReadAt(buf, 16<<10); err != nil { // pread64: pages 4-5
				t.Fatal(err)
			}
			seen := map[uint64]uint32{}
			tr.rd.SetDeadline(time.Now().Add(time.Second))
			for {
				rec, err := tr.rd.Read()
				if err != nil {
					break
				}
				if e, ok := decode(&rec); ok && e.Op == opAcc {
					seen[e.Index] += e.Nr
				}
				if seen[4] >= 2 {
					break
				}
			}
			if seen[4] < 2 {
				t.Fatalf("pread of pages 4-5 not reported as accessed: %v", seen)
			}
		})
	}
}

// TestMincoreAgreesWithCachestat: the mincore variant (kernels before 6.5)
// counts the same cached pages as cachestat(2), whole file and a range.
func TestMincoreAgreesWithCachestat(t *testing.T) {
	if kernel.Cachestat() != nil {
		t.Skipf("no cachestat(2) to compare with: %v", kernel.Cachestat())
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
