package pagecache

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/kernel"
)

// mincoreOnly makes cachestat use mincore where cachestat(2) exists (tests).
var mincoreOnly bool

// cachestat counts the pages of [off, off+n) of the file fd in the page
// cache: cachestat(2) where the kernel has it (6.5), else mincore(2) on a
// read-only mapping, which tells residency only (Dirty and Writeback stay
// 0). n == 0 means to the end of the file.
func cachestat(fd int, off, n uint64) (unix.Cachestat_t, error) {
	var cs unix.Cachestat_t
	if kernel.Cachestat() == nil && !mincoreOnly {
		err := unix.Cachestat(uint(fd), &unix.CachestatRange{Off: off, Len: n}, &cs, 0)
		return cs, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return cs, err
	}
	size := uint64(st.Size)
	if off >= size {
		return cs, nil
	}
	if n == 0 || off+n > size {
		n = size - off
	}
	start := off &^ (pageSize - 1)
	length := off + n - start
	mem, err := unix.Mmap(fd, int64(start), int(length), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return cs, err
	}
	defer unix.Munmap(mem)
	vec := make([]byte, (length+pageSize-1)/pageSize)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return cs, e
	}
	for _, v := range vec {
		if v&1 != 0 {
			cs.Cache++
		}
	}
	return cs, nil
}
