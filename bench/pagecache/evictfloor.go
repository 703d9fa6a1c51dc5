package pagecachebench

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/kernel"
)

// The eviction floor. On an unmodified kernel the agent's only way to drop
// a page is posix_fadvise(POSIX_FADV_DONTNEED) on its range; where every
// read misses (RocksDB and YCSB on a database 4x the cgroup), every page
// loaded is a victim once, so that syscall's cost per scattered page,
// times the pages loaded per read, is a cost no policy and no mechanism
// behind fadvise can go under. The bench measures it on this machine and
// puts it beside the agent-cost target (PART_agent_cpu_floor_pct_per_10k).
//
// What it measured here (kernel 6.18, 2 shared cores): 2.3 µs a single
// scattered page against 0.54 µs a page in 64-page ranges; perf puts most
// of a single page's in what a call does once for all its pages (the LRU
// lock and memcg uncharge of folios_put_refs, the xarray lock of
// __remove_mapping), which ranges share and scattered victims cannot.
// io_uring's IORING_OP_FADVISE cost more (3.9-6.7 µs a page of the
// process's CPU): DONTNEED is always punted to an io-wq worker.

// evictFloorPages is the test file's size in pages (32 MiB) and
// evictFloorSingles how many of them are dropped one by one.
const (
	evictFloorPages   = 8192
	evictFloorSingles = 4096
	evictFloorRange   = 64
	evictFloorReps    = 3
)

// evictCost is what dropping a page of the cache costs the calling
// thread, in ns: one page a call, at random places of a file (single),
// and 64 contiguous pages a call (ranged).
type evictCost struct {
	single, ranged float64
}

// measureEvictCost measures evictCost on a file it writes in dir (the
// cache dir's filesystem), median of evictFloorReps: thread CPU time, so
// that other load on the machine stretches it less than wall time would.
func measureEvictCost(dir string) (evictCost, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return evictCost{}, err
	}
	f, err := os.CreateTemp(dir, "evictfloor-*")
	if err != nil {
		return evictCost{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = 'x'
	}
	for off := 0; off < evictFloorPages*pageBytes; off += len(buf) {
		if _, err := f.WriteAt(buf, int64(off)); err != nil {
			return evictCost{}, err
		}
	}
	if err := f.Sync(); err != nil { // clean pages: DONTNEED starts no writeback
		return evictCost{}, err
	}
	runtime.LockOSThread() // thread CPU time is this thread's
	defer runtime.UnlockOSThread()
	fd := int(f.Fd())
	rng := rand.New(rand.NewSource(1))
	var singles, ranges []float64
	for rep := 0; rep < evictFloorReps; rep++ {
		if err := cacheSmallFolios(fd); err != nil {
			return evictCost{}, err
		}
		perm := rng.Perm(evictFloorPages)[:evictFloorSingles]
		before, err := residentPages(fd)
		if err != nil {
			return evictCost{}, err
		}
		t0 := threadCPU()
		for _, p := range perm {
			if err := unix.Fadvise(fd, int64(p)*pageBytes, pageBytes, unix.FADV_DONTNEED); err != nil {
				return evictCost{}, fmt.Errorf("fadvise: %w", err)
			}
		}
		d := threadCPU() - t0
		// The cost is an eviction's, per page dropped: nearly every call
		// must have dropped its page (a few may be gone before, taken by
		// the kernel's reclaim or never read back: 2 of 8192 once).
		dropped := len(perm)
		if left, err := residentPages(fd); err != nil {
			return evictCost{}, err
		} else if left >= 0 {
			dropped = before - left
			if dropped < len(perm)*99/100 || dropped > len(perm) {
				return evictCost{}, fmt.Errorf("dropping %d of %d cached pages one by one left %d cached: want %d", len(perm), before, left, before-len(perm))
			}
		}
		singles = append(singles, float64(d.Nanoseconds())/float64(dropped))

		if err := cacheSmallFolios(fd); err != nil {
			return evictCost{}, err
		}
		chunks := rng.Perm(evictFloorPages / evictFloorRange)
		t0 = threadCPU()
		for _, c := range chunks {
			if err := unix.Fadvise(fd, int64(c*evictFloorRange)*pageBytes, evictFloorRange*pageBytes, unix.FADV_DONTNEED); err != nil {
				return evictCost{}, fmt.Errorf("fadvise: %w", err)
			}
		}
		d = threadCPU() - t0
		ranges = append(ranges, float64(d.Nanoseconds())/float64(len(chunks)*evictFloorRange))
	}
	return evictCost{single: benchkit.Median(singles), ranged: benchkit.Median(ranges)}, nil
}

// pageBytes is the page size the floor is measured in.
const pageBytes = 4096

// cacheSmallFolios drops the file's pages and reads it back 4 KiB at a
// time with readahead off, so that every page is a folio of its own, as
// random reads leave them (a 4 KiB fadvise cannot drop a page inside a
// larger folio).
func cacheSmallFolios(fd int) error {
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return err
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM); err != nil {
		return err
	}
	b := make([]byte, pageBytes)
	for p := 0; p < evictFloorPages; p++ {
		if _, err := unix.Pread(fd, b, int64(p)*pageBytes); err != nil {
			return err
		}
	}
	return nil
}

// residentPages counts the file's pages still cached (cachestat(2), 6.5;
// -1 without it: the check is skipped).
func residentPages(fd int) (int, error) {
	if kernel.Cachestat() != nil {
		return -1, nil
	}
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(fd), &unix.CachestatRange{}, &cs, 0); err != nil {
		return 0, err
	}
	return int(cs.Cache), nil
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// evictFloor measures the eviction cost once for a workload and keeps it
// in the report's config (nil error: the figures are there).
func evictFloor(rep *benchkit.Report, dir string, progress func(string)) (evictCost, error) {
	c, err := measureEvictCost(dir)
	if err != nil {
		return c, fmt.Errorf("eviction floor: %w", err)
	}
	rep.SetConfig("evict_fadvise_ns_per_page_single", c.single)
	rep.SetConfig("evict_fadvise_ns_per_page_range64", c.ranged)
	if progress != nil {
		progress(fmt.Sprintf("eviction floor: posix_fadvise(DONTNEED) %.0f ns a scattered page, %.0f ns a page in 64-page ranges (thread CPU)", c.single, c.ranged))
	}
	return c, nil
}

// floorTarget reports, beside the agent-cost target of part (costName,
// ≤ 3 % of a core per 10k reads/s), the floor under it: the default's
// pages loaded per read (loadsPer1k / 1000: each is a victim once where
// the cache is full) times a scattered page's fadvise, in the same unit.
func floorTarget(rep *benchkit.Report, part, costName string, c evictCost, loadsPer1k float64) {
	if c.single <= 0 || loadsPer1k <= 0 {
		return
	}
	floor := loadsPer1k / 1000 * c.single * 1e-3 // % of a core per 10k reads/s
	rep.Ratio(part+"_agent_cpu_floor_pct_per_10k", floor)
	verdict := fmt.Sprintf("leaving %.2f %% for everything else the agent does (its policy's work, its BPF programs in the workload's threads)", 3-floor)
	if floor > 3 {
		verdict = "over the target: no agent that evicts through fadvise can meet it on this machine"
	}
	rep.Note(fmt.Sprintf("%s: the eviction floor beside %s: the default loads %.0f pages per 1000 reads, each a victim once in a full cache, and posix_fadvise(DONTNEED) of one scattered page costs %.0f ns of CPU here (%.0f ns a page in 64-page ranges): %.2f %% of a core per 10k reads/s for the evictions' syscalls alone, %s (on an unmodified kernel fadvise is the only way to drop a chosen page; cache_ext evicts inside the kernel's reclaim)",
		part, costName, loadsPer1k, c.single, c.ranged, floor, verdict))
}
