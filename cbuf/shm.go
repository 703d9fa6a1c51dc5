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

// seal fixes a memfd's size (and, with writes, forbids any new writable
// mapping or write through any descriptor, while the manager's own mapping
// stays writable) and makes its inode readable and writable by the
// manager's uid only: a descriptor handed out read-only cannot be reopened
// read-write through /proc/PID/fd by another uid, and no holder can shrink
// it under the others' mappings (SIGBUS) or grow it.
func seal(fd int, futureWrite bool, mode uint32) error {
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if futureWrite {
		seals |= unix.F_SEAL_FUTURE_WRITE
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("seal memfd: %w", err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod memfd: %w", err)
	}
	return nil
}

// sealedMemfd is memfd with sealing allowed, sized and sealed (not against
// writes) at once.
func sealedMemfd(name string, size uint64) (int, error) {
	fd, err := unix.MemfdCreate("cbuf-"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("ftruncate memfd to %d bytes: %w", size, err)
	}
	if err := seal(fd, false, 0o600); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
