package pagecache

import (
	"encoding/binary"
	"fmt"
	"os"
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

// seedStats counts what seeding found.
type seedStats struct {
	pages, foreign, files uint64
	err                   error // why seeding did not run, if it did not
}

// residentPages returns the indexes of the pages of f (size bytes) that
// are cached and charged to the memory cgroup memcg (kernfs id).
func residentPages(f *os.File, size int64, memcg uint64, pagemap, kpcg *os.File) (idx []uint64, foreign uint64, err error) {
	if size <= 0 {
		return nil, 0, nil
	}
	n := (size + pageSize - 1) / pageSize
	m, err := unix.Mmap(int(f.Fd()), 0, int(n*pageSize), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, fmt.Errorf("mmap: %w", err)
	}
	defer unix.Munmap(m)
	// No read-around: a fault on a file mapping reads the pages around the
	// one faulted (charged to the agent's cgroup, not the workload's: the
	// first build of this seed put 32k pages of a 256 MiB file outside a
	// 64 MiB cgroup that way, and fio ran from a cache three times its
	// limit).
	if err := unix.Madvise(m, unix.MADV_RANDOM); err != nil {
		return nil, 0, fmt.Errorf("madvise(MADV_RANDOM): %w", err)
	}
	vec := make([]byte, n)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return nil, 0, fmt.Errorf("mincore: %w", e)
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
		// Map the resident run: a page evicted since mincore would be read
		// back (and charged to the agent's cgroup): rare, and only one.
		if err := unix.Madvise(m[i*pageSize:j*pageSize], unix.MADV_POPULATE_READ); err != nil {
			return nil, 0, fmt.Errorf("madvise(MADV_POPULATE_READ): %w", err)
		}
		if _, err := pagemap.ReadAt(ent[8*i:8*j], int64(base/pageSize+uint64(i))*8); err != nil {
			return nil, 0, fmt.Errorf("read /proc/self/pagemap: %w", err)
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
			return nil, 0, fmt.Errorf("/proc/self/pagemap shows no frame numbers (CAP_SYS_ADMIN needed)")
		}
		if _, err := kpcg.ReadAt(cg[:], int64(pfn)*8); err != nil {
			return nil, 0, fmt.Errorf("read /proc/kpagecgroup: %w", err)
		}
		if binary.LittleEndian.Uint64(cg[:]) != memcg {
			foreign++
			continue
		}
		idx = append(idx, uint64(i))
	}
	return idx, foreign, nil
}

// seed queues an add for every cached page of the watched files charged
// to the agent's cgroup (applied with the next pc_apply runs).
func (a *Agent) seed() seedStats {
	var s seedStats
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		s.err = err
		return s
	}
	defer pagemap.Close()
	kpcg, err := os.Open("/proc/kpagecgroup")
	if err != nil {
		s.err = err
		return s
	}
	defer kpcg.Close()
	for id, path := range a.tr.fileList() {
		f, err := os.Open(path)
		if err != nil {
			continue // gone since registered: nothing of it to seed
		}
		st, err := f.Stat()
		if err == nil {
			var idx []uint64
			var foreign uint64
			idx, foreign, err = residentPages(f, st.Size(), a.cg.ID, pagemap, kpcg)
			s.foreign += foreign
			for _, i := range idx {
				a.back = append(a.back, Event{Op: opAdd, File: id, Index: i})
			}
			s.pages += uint64(len(idx))
			if len(idx) > 0 {
				s.files++
			}
		}
		f.Close()
		if err != nil {
			s.err = fmt.Errorf("%s: %w", path, err)
			return s
		}
	}
	return s
}
