package pool

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel -no-global-types objs ../bpf/pool/pool.bpf.c

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// Errors of object operations, from the BPF side's -errno.
var (
	ErrNotFound = errors.New("pool: no such object")
	ErrTooBig   = errors.New("pool: object larger than block size × max blocks")
	ErrPoolFull = errors.New("pool: pool or allocation map full")
	ErrConflict = errors.New("pool: object changed concurrently; retry")
)

func errnoErr(ret int32) error {
	switch ret {
	case 0:
		return nil
	case -2:
		return ErrNotFound
	case -7:
		return ErrTooBig
	case -28:
		return ErrPoolFull
	case -11:
		return ErrConflict
	}
	return fmt.Errorf("pool: error %d", ret)
}

// opArgs mirrors struct pool_op_args.
type opArgs struct {
	ID   uint64
	Len  uint32
	Slot uint32
	Ret  int32
	Pad  uint32
}

// Objects is the generic object store of bpf/pool/pool.bpf.c, driven from
// user space through its SYSCALL programs: the very code BPF users run.
type Objects struct {
	Cfg   Config
	objs  objsObjects
	slots chan uint32
}

// Open loads a pool of generic objects.
func Open(cfg Config) (*Objects, error) {
	cfg = cfg.WithDefaults()
	spec, err := loadObjs()
	if err != nil {
		return nil, err
	}
	if err := cfg.Apply(spec); err != nil {
		return nil, err
	}
	o := &Objects{Cfg: cfg}
	if err := spec.LoadAndAssign(&o.objs, nil); err != nil {
		return nil, fmt.Errorf("load pool: %w", err)
	}
	n := o.objs.PoolStaging.MaxEntries()
	o.slots = make(chan uint32, n)
	for i := uint32(0); i < n; i++ {
		o.slots <- i
	}
	return o, nil
}

// Close frees the pool.
func (o *Objects) Close() error { return o.objs.Close() }

// Maps are the pool's maps (for CollectStats or pinning).
func (o *Objects) Maps() Maps {
	return Maps{Index: o.objs.PoolIndex, Blocks: o.objs.PoolBlocks, Stats: o.objs.PoolStats}
}

// Pin pins the pool's maps under dir.
func (o *Objects) Pin(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, m := range map[string]*ebpf.Map{"pool_index": o.objs.PoolIndex, "pool_blocks": o.objs.PoolBlocks,
		"pool_stats": o.objs.PoolStats, "pool_objects": o.objs.PoolObjects} {
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

func (o *Objects) run(p *ebpf.Program, a *opArgs) error {
	if _, err := p.Run(&ebpf.RunOptions{Context: *a, ContextOut: a}); err != nil {
		return fmt.Errorf("pool: run %v: %w", p, err)
	}
	return nil
}

// Write stores data as a new version of object id.
func (o *Objects) Write(id uint64, data []byte) error {
	if uint32(len(data)) > o.Cfg.MaxLen() {
		// Let the kernel refuse it too, so the oversize counter is true.
		a := opArgs{ID: id, Len: uint32(len(data))}
		slot := <-o.slots
		defer func() { o.slots <- slot }()
		a.Slot = slot
		if err := o.run(o.objs.PoolWrite, &a); err != nil {
			return err
		}
		return errnoErr(a.Ret)
	}
	slot := <-o.slots
	defer func() { o.slots <- slot }()
	buf := make([]byte, o.objs.PoolStaging.ValueSize())
	copy(buf, data)
	if err := o.objs.PoolStaging.Update(slot, buf, ebpf.UpdateAny); err != nil {
		return err
	}
	a := opArgs{ID: id, Len: uint32(len(data)), Slot: slot}
	if err := o.run(o.objs.PoolWrite, &a); err != nil {
		return err
	}
	return errnoErr(a.Ret)
}

// Read returns the current content of object id; never a mix of versions.
func (o *Objects) Read(id uint64) ([]byte, error) {
	slot := <-o.slots
	defer func() { o.slots <- slot }()
	a := opArgs{ID: id, Slot: slot}
	if err := o.run(o.objs.PoolRead, &a); err != nil {
		return nil, err
	}
	if a.Ret < 0 {
		return nil, errnoErr(a.Ret)
	}
	buf := make([]byte, o.objs.PoolStaging.ValueSize())
	if err := o.objs.PoolStaging.Lookup(slot, &buf); err != nil {
		return nil, err
	}
	return buf[:a.Ret], nil
}

// Resize changes object id's length, allocating or freeing only the blocks
// that change; the common prefix is kept.
func (o *Objects) Resize(id uint64, n uint32) error {
	a := opArgs{ID: id, Len: n}
	if err := o.run(o.objs.PoolResizeObj, &a); err != nil {
		return err
	}
	return errnoErr(a.Ret)
}

// Free deletes object id and its blocks.
func (o *Objects) Free(id uint64) error {
	a := opArgs{ID: id}
	if err := o.run(o.objs.PoolFreeObj, &a); err != nil {
		return err
	}
	return errnoErr(a.Ret)
}

// Stats walks the pool and the objects.
func (o *Objects) Stats() (Stats, error) {
	maxBlocks := (int(o.objs.PoolObjects.ValueSize()) - 16 - RefHeaderSize) / 8
	return CollectStats(o.Maps(), func(yield func(Ref) bool) error {
		var key uint64
		val := make([]byte, o.objs.PoolObjects.ValueSize())
		it := o.objs.PoolObjects.Iterate()
		for it.Next(&key, &val) {
			r, err := ParseRef(val[16:], maxBlocks) // after lock, dead, id
			if err != nil {
				return err
			}
			if !yield(r) {
				return nil
			}
		}
		return it.Err()
	})
}
