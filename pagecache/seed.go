package pagecache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Seeding: an agent started over a warm cache (by hand on a running
// workload, or by auto switching policies mid-run) would otherwise know
// only the folios added after its start. The pages cached before it are
// then evicted by nobody: they hold their share of the cgroup while the
// policy turns over the rest (auto's first mid-run switch on zipf loaded
// 6 % more pages than the kernel's default). So at start the agent tells
// the policy about every page of the watched files that is cached and
// charged to its cgroup, as if just added.
//
// Which cgroup a cached page is charged to is only told by the kernel's
// page-frame files: the file is mapped, only its resident pages are
// faulted in (MADV_POPULATE_READ per resident run, no I/O), their frame
// numbers read from /proc/self/pagemap and each frame's memory cgroup from
// /proc/kpagecgroup; then the mapping goes (a mapped page cannot be
// dropped). A page charged to another cgroup is never seeded: the agent
// evicts only what is its cgroup's.

// The history the kernel kept: /proc/kpageflags tells, per frame, whether
// the page is on the active list (read at least twice since it came in,
// or promoted) or referenced on the inactive one (read once more). A
// policy that counts reads (W-TinyLFU, LFU, LHD) started over a warm cache
// would otherwise see every page as read once: auto's switch to W-TinyLFU
// mid-run on zipf then turned over the hot pages the default had kept. So
// the seed adds the pages coldest first (a recency policy's queue in the
// kernel's order) and, to a policy that takes accesses, reports the
// active pages read twice and the referenced ones once.
const (
	kpfReferenced = 1 << 2 // include/uapi/linux/kernel-page-flags.h
	kpfActive     = 1 << 6
)

// Page heat, from the kernel's flags: how many reads the seed reports.
const (
	heatCold = iota
	heatReferenced
	heatActive
	heats
)

// touchSink keeps the compiler from dropping the seed's touches.
var touchSink byte

// seedResult is a seed's count, its events for the policy and its time.
type seedResult struct {
	stats  seedStats
	events []Event
	took   time.Duration
}

// seedStats counts what seeding found.
type seedStats struct {
	pages, foreign, files uint64
	byHeat                [heats]uint64
	err                   error // why seeding did not run, if it did not
	// skipped: the policy evicts its newest first (evict.Policy
	// NewestFirst): what was cached before the start would be its last
	// victims, seeded or not.
	skipped bool
}

// residentPages returns the indexes of the pages of f (size bytes) that
// are cached and charged to the memory cgroup memcg (kernfs id).
// heat, when kpf is open (/proc/kpageflags), is each page's heat.
func residentPages(f *os.File, size int64, memcg uint64, pagemap, kpcg, kpf *os.File) (idx []uint64, heat []uint8, foreign uint64, err error) {
	if size <= 0 {
		return nil, nil, 0, nil
	}
	n := (size + pageSize - 1) / pageSize
	m, err := unix.Mmap(int(f.Fd()), 0, int(n*pageSize), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("mmap: %w", err)
	}
	defer unix.Munmap(m)
	// No read-around: a fault on a file mapping reads the pages around the
	// one faulted (charged to the agent's cgroup, not the workload's: the
	// first build of this seed put 32k pages of a 256 MiB file outside a
	// 64 MiB cgroup that way, and fio ran from a cache three times its
	// limit).
	if err := unix.Madvise(m, unix.MADV_RANDOM); err != nil {
		return nil, nil, 0, fmt.Errorf("madvise(MADV_RANDOM): %w", err)
	}
	vec := make([]byte, n)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return nil, nil, 0, fmt.Errorf("mincore: %w", e)
	}
	base := uint64(uintptr(unsafe.Pointer(&m[0])))
	ent := make([]byte, 8*n)
	for i := int64(0); i < n; {
		if vec[i]&1 == 0 {
			i++
			continue
		}
		j := i
		for j < n && vec[j]&1 != 0 {
			j++
		}
		// Map the resident run by touching it: a page evicted since mincore
		// would be read back (and charged to the agent's cgroup): rare, and
		// only one. Not MADV_POPULATE_READ: it faults in through
		// get_user_pages(FOLL_TOUCH), which marks every page accessed, and
		// so activated every page the workload had read once (the seed's
		// first build read 4,094 active pages of 2,048 read thrice and
		// 2,048 once) and lost the history it reads below. A plain fault
		// leaves the flags alone, and MADV_RANDOM keeps munmap from
		// passing the young bits on.
		var sum byte
		for k := i; k < j; k++ {
			sum += m[k*pageSize]
		}
		touchSink = sum
		if _, err := pagemap.ReadAt(ent[8*i:8*j], int64(base/pageSize+uint64(i))*8); err != nil {
			return nil, nil, 0, fmt.Errorf("read /proc/self/pagemap: %w", err)
		}
		i = j
	}
	var cg [8]byte
	for i := int64(0); i < n; i++ {
		if vec[i]&1 == 0 {
			continue
		}
		e := binary.LittleEndian.Uint64(ent[8*i:])
		if e&(1<<63) == 0 { // not present after all
			continue
		}
		pfn := e & (1<<55 - 1)
		if pfn == 0 {
			return nil, nil, 0, fmt.Errorf("/proc/self/pagemap shows no frame numbers (CAP_SYS_ADMIN needed)")
		}
		if _, err := kpcg.ReadAt(cg[:], int64(pfn)*8); err != nil {
			return nil, nil, 0, fmt.Errorf("read /proc/kpagecgroup: %w", err)
		}
		if binary.LittleEndian.Uint64(cg[:]) != memcg {
			foreign++
			continue
		}
		idx = append(idx, uint64(i))
		if kpf != nil {
			h := uint8(heatCold)
			if _, err := kpf.ReadAt(cg[:], int64(pfn)*8); err == nil {
				switch fl := binary.LittleEndian.Uint64(cg[:]); {
				case fl&kpfActive != 0:
					h = heatActive
				case fl&kpfReferenced != 0:
					h = heatReferenced
				}
			}
			heat = append(heat, h)
		}
	}
	return idx, heat, foreign, nil
}

// seed returns an add for every cached page of the watched files charged
// to the agent's cgroup, coldest first, and for a policy that takes
// accesses the reads its heat stands for (the agent queues them).
func (a *Agent) seed() (r seedResult) {
	t0 := time.Now()
	defer func() { r.took = time.Since(t0) }()
	s := &r.stats
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		s.err = err
		return r
	}
	defer pagemap.Close()
	kpcg, err := os.Open("/proc/kpagecgroup")
	if err != nil {
		s.err = err
		return r
	}
	defer kpcg.Close()
	var kpf *os.File
	if kpf, err = os.Open("/proc/kpageflags"); err == nil {
		defer kpf.Close()
	} // without it every page is seeded cold
	var byHeat [heats][]Event
	// In id order, which is the walk's, directory by directory: each file
	// is opened relative to its directory (openat), where a path looked
	// up from the root per file was a quarter of the seed's time.
	files := a.tr.fileList()
	ids := slices.Sorted(maps.Keys(files))
	dirs := dirOpener{}
	defer dirs.close()
	for _, id := range ids {
		if a.seedStop.Load() {
			s.err = errors.New("the agent closed")
			return r
		}
		path := files[id]
		f, err := dirs.open(path)
		if err != nil {
			continue // gone since registered: nothing of it to seed
		}
		st, err := f.Stat()
		// A file with nothing cached is not mapped (cachestat, 6.5+): on
		// the full search's tree half the files, and the map, unmap and
		// their calls were a third of the seed's time.
		var cs unix.Cachestat_t
		if err == nil && unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0) == nil && cs.Cache == 0 {
			f.Close()
			continue
		}
		if err == nil {
			var idx []uint64
			var heat []uint8
			var foreign uint64
			idx, heat, foreign, err = residentPages(f, st.Size(), a.cg.ID, pagemap, kpcg, kpf)
			s.foreign += foreign
			for j, i := range idx {
				h := heatCold
				if j < len(heat) {
					h = int(heat[j])
				}
				byHeat[h] = append(byHeat[h], Event{Op: opAdd, File: id, Index: i})
			}
			s.pages += uint64(len(idx))
			if len(idx) > 0 {
				s.files++
			}
		}
		f.Close()
		if err != nil {
			s.err = fmt.Errorf("%s: %w", path, err)
			break
		}
	}
	// A page read once is referenced, read again active: the reads a
	// live page of that heat would have reported (its first one is not a
	// hit when the policy skips it, as live).
	for h, evs := range byHeat { // a heat's adds and reads before the next's
		s.byHeat[h] = uint64(len(evs))
		r.events = append(r.events, evs...)
		for n := 0; a.pol.accesses && n < h; n++ {
			for _, e := range evs {
				r.events = append(r.events, Event{Op: opAcc, File: e.File, Index: e.Index, Nr: 1})
			}
		}
	}
	return r
}

// dirOpener opens files relative to the directory of the last one opened.
type dirOpener struct {
	name string // "" when no directory is open
	fd   int
}

func (d *dirOpener) open(path string) (*os.File, error) {
	dir, base := filepath.Split(path)
	if d.name != dir {
		d.close()
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		d.name, d.fd = dir, fd
	}
	fd, err := unix.Openat(d.fd, base, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (d *dirOpener) close() {
	if d.name != "" {
		unix.Close(d.fd)
	}
	d.name, d.fd = "", -1
}
