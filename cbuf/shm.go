package cbuf

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// memfd creates a sparse memfd of size bytes.
func memfd(name string, size uint64) (int, error) {
	fd, err := unix.MemfdCreate("cbuf-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("ftruncate memfd to %d bytes: %w", size, err)
	}
	return fd, nil
}

// readOnlyFd reopens fd read-only: a mapping made from it can never be
// writable (mmap and mprotect refuse PROT_WRITE), which is what makes a
// received buffer immutable for its receiver.
func readOnlyFd(fd int) (int, error) {
	ro, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("reopen memfd read-only: %w", err)
	}
	return ro, nil
}

func mapShared(fd int, size uint64, write bool) ([]byte, error) {
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	b, err := unix.Mmap(fd, 0, int(size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return b, nil
}

func hdrOf(b []byte) *Hdr { return (*Hdr)(unsafe.Pointer(&b[0])) }

func metasOf(b []byte, off uint64, maxBufs uint32) []Meta {
	return unsafe.Slice((*Meta)(unsafe.Pointer(&b[off])), int(MaxComponents)*int(maxBufs))
}

func dirsOf(b []byte, maxBufs uint32) []Dir {
	return unsafe.Slice((*Dir)(unsafe.Pointer(&b[0])), int(MaxComponents)*int(maxBufs))
}

// loadDir reads a directory entry as the one 64-bit word the manager stores.
func loadDir(d *Dir) Dir {
	v := atomic.LoadUint64((*uint64)(unsafe.Pointer(d)))
	return Dir{PageOff: uint32(v), NPages: uint16(v >> 32), Gen: uint16(v >> 48)}
}

func storeDir(d *Dir, v Dir) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(d)), uint64(v.PageOff)|uint64(v.NPages)<<32|uint64(v.Gen)<<48)
}
