// Package cbuf is CBUF: zero-copy shared buffers between processes, with
// liveness tracked per component by reference, sent and received counts,
// collection by a manager, and pool sizes set by policy.
//
// The shared layout is defined by lib/cbuf/include/cbuf_layout.h; this file
// mirrors it byte for byte (TestLayoutMatchesC checks it against the C
// compiler's view), so C and Go clients share one manager and one pool.
package cbuf

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	Magic         = 0x46554243
	Version       = 1
	PageSize      = 4096
	MaxComponents = 64
	Classes       = 7
	MaxPages      = 64
	RingSize      = 4096

	refShift  = 0
	sentShift = 16
	recvShift = 32
	flagShift = 48
	ref1      = uint64(1) << refShift
	sent1     = uint64(1) << sentShift
	recv1     = uint64(1) << recvShift

	FlagInconsistent = uint64(1) << (flagShift + 0)
	FlagRelinquish   = uint64(1) << (flagShift + 1)
	// FlagGranted (set by the manager in the owner's word) marks a buffer
	// granted to another uid: its owner's last free must not recycle it.
	FlagGranted = uint64(1) << (flagShift + 2)
	flagMask    = uint64(0xffff) << flagShift

	nextEnd    = 0xffffffff
	nextCached = 0xfffffffe // in a C thread cache: the word is exactly ref1 (cbuf_layout.h)

	AggMagic = 0x47474143
)

// Wire operations on the manager socket.
const (
	opHello      = 1
	opCollect    = 2
	opMap        = 3
	opRelinquish = 4
	opStats      = 5
	opKRecv      = 6
	opExport     = 7  // this component's buffers get one memfd each, so they can be granted
	opBufFd      = 8  // arg: index, arg2: gen; reply fd: the owner's own buffer, read-write
	opMapBuf     = 9  // arg2: id; reply fd: one buffer, read-only; reply arg2: bytes
	opGrant      = 10 // arg2: id, name[0:8]: the peer's token
)

// mapPerBuffer is MAP's answer for a pool whose buffers are mapped one by one.
const mapPerBuffer = unix.EXDEV

// KernelSlot is the kernel component's slot (manager run with a KernelSource).
const KernelSlot = MaxComponents - 1

// Meta is one component's counters for one buffer (struct cbuf_meta).
type Meta struct {
	Cnt  uint64
	Next uint32
	Pad  uint32
}

// Dir is the manager's record of one buffer (struct cbuf_dir).
type Dir struct {
	PageOff uint32
	NPages  uint16
	Gen     uint16
}

// Hdr starts every component's meta object (struct cbuf_hdr).
type Hdr struct {
	Magic     uint32
	Version   uint32
	Slot      uint32
	MaxBufs   uint32
	PoolBytes uint64
	MetaOff   uint64
	FreeHeads [8]uint64
	Allocs    uint64
	Frees     uint64
	Sends     uint64
	Recvs     uint64
	Collects  uint64
	BlockedNs uint64
	TcFlush   uint64 // bumped to ask the C client's thread caches back (cbuf_layout.h)
	Pad0      uint64
	RingHead  uint32
	Pad1      [15]uint32
	RingTail  uint32
	Pad2      [15]uint32
	Ring      [RingSize]uint32
	// SlotEpoch counts the components each slot has had (the manager
	// bumps it at every HELLO): a client's mapping of a slot's pool made
	// under another epoch belongs to a component that has left.
	SlotEpoch [MaxComponents]uint32
}

// AggEnt is one (id, offset, length) entry of an aggregate cbuf.
type AggEnt struct {
	ID  uint64
	Off uint32
	Len uint32
}

// aggHdr heads an aggregate cbuf (struct cbuf_agg).
type aggHdr struct {
	Magic uint32
	N     uint32
	Cap   uint32
	Pad   uint32
}

type msg struct {
	Op   uint32
	Arg  uint32
	Arg2 uint64
	Name [48]byte
}

type reply struct {
	Status int32
	Arg    uint32
	Arg2   uint64
}

// ID names a buffer system-wide: gen<<48 | slot<<32 | index.
type ID uint64

func makeID(gen uint16, slot, idx uint32) ID {
	return ID(uint64(gen)<<48 | uint64(slot)<<32 | uint64(idx))
}
func (id ID) Gen() uint16   { return uint16(id >> 48) }
func (id ID) Slot() uint32  { return uint32(id>>32) & 0xffff }
func (id ID) Index() uint32 { return uint32(id) }

func cnt(w uint64, shift uint) uint32 { return uint32(w>>shift) & 0xffff }

// sizeClass is the free list for a size: ceil(log2(pages)).
func sizeClass(size int) int {
	pages := (size + PageSize - 1) / PageSize
	k := 0
	for 1<<k < pages {
		k++
	}
	return k
}

// Layout sizes for a given number of buffer indexes per component.
func metaOff() uint64 {
	return (uint64(unsafe.Sizeof(Hdr{})) + PageSize - 1) &^ (PageSize - 1)
}
func metaBytes(maxBufs uint32) uint64 {
	return metaOff() + uint64(MaxComponents)*uint64(maxBufs)*uint64(unsafe.Sizeof(Meta{}))
}
func dirBytes(maxBufs uint32) uint64 {
	return uint64(MaxComponents) * uint64(maxBufs) * uint64(unsafe.Sizeof(Dir{}))
}
