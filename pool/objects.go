package pool

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel -type pool_op_args kern ../bpf/pool/pool.bpf.c

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/mounts"
	"github.com/cistern-ebpf/cistern/kernel"
)

// Errors of object operations, from the BPF side's -errno.
var (
	ErrNotFound = errors.New("no such object")                                     // -ENOENT
	ErrTooBig   = errors.New("object larger than block size × max blocks")         // -E2BIG
	ErrPoolFull = errors.New("pool or allocation map full")                        // -ENOSPC
	ErrConflict = errors.New("object changed concurrently; retry")                 // -EAGAIN, -EBUSY
	errBusy     = fmt.Errorf("this CPU's pool scratch is in use: %w", ErrConflict) // -EBUSY
)

// Kernel errno values the BPF side returns (pool.bpf.h POOL_E*).
const (
	errnoENOENT = 2
	errnoE2BIG  = 7
	errnoEAGAIN = 11
	errnoEBUSY  = 16
	errnoEINVAL = 22
	errnoENOSPC = 28
)

// RetError turns what a pool_obj_* function returned (a length, 0 or
// -errno) into nil or one of the errors above, for the CISTERN_CALL programs
// of your own objects.
func RetError(ret int32) error {
	switch {
	case ret >= 0:
		return nil
	case ret == -errnoENOENT:
		return ErrNotFound
	case ret == -errnoE2BIG:
		return ErrTooBig
	case ret == -errnoENOSPC:
		return ErrPoolFull
	case ret == -errnoEAGAIN:
		return ErrConflict
	case ret == -errnoEBUSY:
		return errBusy
	case ret == -errnoEINVAL:
		return errors.New("invalid argument (staging slot or pool maps misconfigured)")
	}
	return fmt.Errorf("error %d from the BPF side", ret)
}

// Slots is how many operations that move data (Write, Read) run at once;
// more callers wait for a staging slot.
const Slots = 8

// objectRefOffset is where the pool_ref starts in a struct pool_object:
// lock, dead, id.
const objectRefOffset = 4 + 4 + 8

// busyRetries bounds the retries of an operation that found its CPU's
// scratch taken (a preempted caller on the same CPU; never on a
// non-preemptible kernel).
const busyRetries = 50

// Objects is the generic object store of bpf/pool/pool.bpf.c (u64 id ->
// variable-length bytes), driven through its CISTERN_CALL programs: the very code
// a BPF program runs when it includes pool.bpf.h with CISTERN_POOL_OBJECTS.
// It is safe for concurrent use.
type Objects struct {
	cfg    Config
	objs   kernObjects
	slots  chan uint32
	bufs   [Slots][]byte // staging buffer of each slot, owned by the slot holder
	rodata *ebpf.Map     // .rodata, pinned by Pin so OpenPinned learns the config
}

// Open loads a pool of generic objects sized by cfg.
func Open(cfg Config) (*Objects, error) {
	spec, err := loadKern()
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	return openSpec(spec, cfg, nil)
}

// openSpec loads spec, bpf/pool/pool.bpf.c as embedded or built otherwise
// (tests build it with other CISTERN_POOL_MAX_BLOCKS), on the maps in replace.
func openSpec(spec *ebpf.CollectionSpec, cfg Config, replace map[string]*ebpf.Map) (*Objects, error) {
	compiled, err := CompiledMaxBlocks(spec)
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	if cfg.MaxBlocks == 0 {
		cfg.MaxBlocks = min(DefaultMaxBlocks, compiled)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Apply(spec); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	spec.Maps["pool_staging"].MaxEntries = Slots
	o := &Objects{cfg: cfg}
	var rodata *ebpf.Map
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: replace})
	if err == nil {
		// Keep .rodata (for Pin) and hand everything else to kernObjects.
		rodata, err = coll.Maps[".rodata"].Clone()
		if err == nil {
			err = coll.Assign(&o.objs)
		}
		coll.Close()
	}
	if err != nil {
		if rodata != nil {
			rodata.Close()
		}
		o.objs.Close()
		return nil, fmt.Errorf("pool: load bpf/pool/pool.bpf.c: %w", err)
	}
	o.rodata = rodata
	vs := o.objs.PoolStaging.ValueSize()
	o.slots = make(chan uint32, Slots)
	for i := range uint32(Slots) {
		o.bufs[i] = make([]byte, vs)
		o.slots <- i
	}
	return o, nil
}

// Close unloads the pool (pinned maps stay until unpinned).
func (o *Objects) Close() error {
	if o.rodata != nil {
		o.rodata.Close()
	}
	return o.objs.Close()
}

// Config is the pool's configuration, defaults filled in.
func (o *Objects) Config() Config { return o.cfg }

// MaxLen is the largest object: BlockSize × MaxBlocks.
func (o *Objects) MaxLen() uint32 { return o.cfg.MaxLen() }

// Maps are the pool's maps, for CollectStats.
func (o *Objects) Maps() Maps {
	return Maps{Index: o.objs.PoolIndex, Blocks: o.objs.PoolBlocks, Stats: o.objs.PoolStats}
}

// ObjectsMap is the allocation map pool_objects (u64 id -> struct pool_object).
func (o *Objects) ObjectsMap() *ebpf.Map { return o.objs.PoolObjects }

// pinned are the maps Pin shares: everything but the per-loader staging and
// scratch buffers.
func (o *Objects) pinned() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"pool_index": o.objs.PoolIndex, "pool_blocks": o.objs.PoolBlocks, "pool_slots": o.objs.PoolSlots,
		"pool_zero": o.objs.PoolZero, "pool_stats": o.objs.PoolStats, "pool_objects": o.objs.PoolObjects, "pool_rodata": o.rodata,
	}
}

// Pin pins the pool's shared maps under dir (on a bpffs), so OpenPinned in
// another process works on the same objects. Remove them with Unpin.
func (o *Objects) Pin(dir string) error {
	if err := mounts.PinDir(dir); err != nil {
		return fmt.Errorf("pool: pin: %w", err)
	}
	for name, m := range o.pinned() {
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("pool: pin %s: %w", name, err)
		}
	}
	return nil
}

// Unpin removes the pins Pin made.
func (o *Objects) Unpin() error {
	var errs []error
	for _, m := range o.pinned() {
		errs = append(errs, m.Unpin())
	}
	return errors.Join(errs...)
}

// OpenPinned loads the object programs again on the maps another Objects
// pinned in dir: both see and change the same objects.
func OpenPinned(dir string) (*Objects, error) {
	maps := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range maps {
			m.Close()
		}
	}()
	for _, name := range []string{"pool_index", "pool_blocks", "pool_slots", "pool_zero", "pool_stats", "pool_objects", "pool_rodata"} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			return nil, fmt.Errorf("pool: no pool pinned in %s: %w", dir, err)
		}
		maps[name] = m
	}
	spec, err := loadKern()
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	maxBlocks, err := pinnedMaxBlocks(spec, maps["pool_rodata"])
	if err != nil {
		return nil, err
	}
	cfg := Config{
		BlockSize:      maps["pool_blocks"].ValueSize() - 2*BlockHeader,
		MaxBlocks:      maxBlocks,
		CapacityBlocks: maps["pool_blocks"].MaxEntries(),
		MaxObjects:     maps["pool_objects"].MaxEntries(),
	}
	rodata := maps["pool_rodata"]
	delete(maps, "pool_rodata")
	defer rodata.Close()
	return openSpec(spec, cfg, maps)
}

// pinnedMaxBlocks reads pool_max_blocks out of a pinned .rodata.
func pinnedMaxBlocks(spec *ebpf.CollectionSpec, rodata *ebpf.Map) (uint32, error) {
	v, ok := spec.Variables["pool_max_blocks"]
	if !ok {
		return 0, errors.New("pool: object has no pool_max_blocks")
	}
	buf := make([]byte, rodata.ValueSize())
	if err := rodata.Lookup(uint32(0), &buf); err != nil {
		return 0, fmt.Errorf("pool: read pinned .rodata: %w", err)
	}
	if int(v.Offset)+4 > len(buf) {
		return 0, errors.New("pool: pinned .rodata does not match this build")
	}
	return binary.LittleEndian.Uint32(buf[v.Offset:]), nil
}

// run calls one of the pool_* programs with a as its arguments (read back
// after), retrying while this CPU's scratch is busy.
func (o *Objects) run(p *ebpf.Program, a *kernPoolOpArgs) error {
	for try := 0; ; try++ {
		if err := kernel.Call(p, a); err != nil {
			return err
		}
		if a.Ret != -errnoEBUSY || try == busyRetries {
			return RetError(a.Ret)
		}
		if try < 10 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func (o *Objects) slot() uint32     { return <-o.slots }
func (o *Objects) release(s uint32) { o.slots <- s }

// Write stores data as the new content of object id, creating it if needed.
// ErrTooBig if data is longer than MaxLen, ErrPoolFull when the pool or the
// allocation map is full (nothing is changed), ErrConflict when the object
// was freed concurrently (nothing is written).
func (o *Objects) Write(id uint64, data []byte) error {
	a := kernPoolOpArgs{Id: id, Len: uint32(min(len(data), math.MaxUint32))}
	s := o.slot()
	defer o.release(s)
	a.Slot = s
	if len(data) <= int(o.cfg.MaxLen()) {
		buf := o.bufs[s]
		copy(buf, data)
		if err := o.objs.PoolStaging.Update(s, buf, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("pool: write %d: staging: %w", id, err)
		}
	} // else: the BPF side refuses it without reading the slot, and counts it
	if err := o.run(o.objs.PoolWrite, &a); err != nil {
		return fmt.Errorf("pool: write %d (%d bytes): %w", id, len(data), err)
	}
	return nil
}

// Read returns the current content of object id: always one whole version,
// never a mix. ErrNotFound if it does not exist, ErrConflict if every retry
// met a concurrent writer.
func (o *Objects) Read(id uint64) ([]byte, error) {
	s := o.slot()
	defer o.release(s)
	a := kernPoolOpArgs{Id: id, Slot: s}
	if err := o.run(o.objs.PoolRead, &a); err != nil {
		return nil, fmt.Errorf("pool: read %d: %w", id, err)
	}
	buf := o.bufs[s]
	if err := o.objs.PoolStaging.Lookup(s, buf); err != nil {
		return nil, fmt.Errorf("pool: read %d: staging: %w", id, err)
	}
	if int(a.Ret) > len(buf) {
		return nil, fmt.Errorf("pool: read %d: length %d past the staging buffer", id, a.Ret)
	}
	return append([]byte(nil), buf[:a.Ret]...), nil
}

// Resize sets object id's length to n, allocating or freeing only the blocks
// that change; the common prefix is kept. Bytes past the old length are zero
// in new blocks but unspecified in the old last block. ErrConflict if the
// object changed meanwhile (nothing is changed).
func (o *Objects) Resize(id uint64, n uint32) error {
	a := kernPoolOpArgs{Id: id, Len: n}
	if err := o.run(o.objs.PoolResizeObj, &a); err != nil {
		return fmt.Errorf("pool: resize %d to %d: %w", id, n, err)
	}
	return nil
}

// Free deletes object id and frees its blocks.
func (o *Objects) Free(id uint64) error {
	a := kernPoolOpArgs{Id: id}
	if err := o.run(o.objs.PoolFreeObj, &a); err != nil {
		return fmt.Errorf("pool: free %d: %w", id, err)
	}
	return nil
}

// Refs calls yield with the id and Ref of every live object.
func (o *Objects) Refs(yield func(id uint64, r Ref) bool) error {
	return ForEachObject(o.objs.PoolObjects, yield)
}

// Stats counts the pool's blocks and objects and reads its counters.
func (o *Objects) Stats() (Stats, error) {
	return CollectStats(o.Maps(), ObjectRefs(o.objs.PoolObjects))
}

// ForEachObject calls fn with the id and Ref of every live object of a
// generic allocation map, pool_objects (u64 id -> struct pool_object), in any
// collection built with CISTERN_POOL_OBJECTS, until fn returns false.
func ForEachObject(objects *ebpf.Map, fn func(id uint64, r Ref) bool) error {
	compiled := (int(objects.ValueSize()) - objectRefOffset - RefHeaderSize) / 8
	if objects.KeySize() != 8 || compiled < 1 || objectRefOffset+RefSize(compiled) != int(objects.ValueSize()) {
		return fmt.Errorf("pool: %v is not a pool_objects map", objects)
	}
	var perr error
	err := ForEach(objects, func(_, v []byte) bool {
		dead := binary.LittleEndian.Uint32(v[4:]) // after the bpf_spin_lock
		id := binary.LittleEndian.Uint64(v[8:])
		r, err := ParseRef(v[objectRefOffset:], compiled)
		if err != nil {
			perr = fmt.Errorf("pool: object %d: %w", id, err)
			return false
		}
		return dead != 0 || fn(id, r)
	})
	return errors.Join(err, perr)
}

// ObjectRefs is the refs argument of CollectStats for a pool_objects map.
func ObjectRefs(objects *ebpf.Map) func(yield func(Ref) bool) error {
	return func(yield func(Ref) bool) error {
		return ForEachObject(objects, func(_ uint64, r Ref) bool { return yield(r) })
	}
}
