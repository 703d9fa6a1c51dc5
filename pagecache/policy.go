package pagecache

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/percpu"
	"github.com/cistern-ebpf/cistern/kernel"
)

// Constants of cistern/pagecache.h.
const (
	batchSize  = 4096 // PC_BATCH
	maxVictims = 1024 // PC_MAX_VICTIMS
	eventSize  = 32   // sizeof(struct pc_event)
	victimSize = 16   // sizeof(struct pc_victim)

	opAdd = 1
	opDel = 2
	opAcc = 3
)

// applyStatNames are pc_apply_stats, in enum pc_apply_stat order.
var applyStatNames = []string{"added", "readded", "removed", "del_unknown", "acc_hits", "victims", "full", "first_reads", "read_again"}

// Event is one tracker event (struct pc_event).
type Event struct {
	Op    uint8
	Order uint8
	File  uint32
	Index uint64
	TID   uint32
	TGID  uint32
	Nr    uint32
	Read  uint32 // opAcc: the read's number in thread TID (0: none)
}

// Victim is a folio the policy chose: File, its first page, and pages.
type Victim struct {
	File  uint32
	Index uint32
	Pages uint32
	tries int // evictions tried (the agent retries folios under I/O)
}

// policy is a loaded policy object with its pc_apply program.
type policy struct {
	name    string
	coll    *ebpf.Collection
	apply   *ebpf.Program
	batches *ebpf.Map
	out     *ebpf.Map
	// periodic is the policy's work off the hot path (LHD's density
	// rebuild), run after the batches that changed the policy; nil if none.
	periodic *ebpf.Program
	buf      []byte
	obuf     []byte
}

type runArgs struct {
	Ret  int32
	Want uint32
	Got  uint32
	Pad  uint32
}

// openPolicy loads the page-cache object of p with room for capacity folios
// and runs its init; sample is the tracker's access sampling (0 or 1: every
// read).
func openPolicy(p evict.Policy, capacity uint32, sample uint32) (*policy, error) {
	name := p.Name
	spec, err := p.Spec(evict.PageCache)
	if err != nil {
		return nil, err
	}
	if err := (evict.Config{Policy: name, Capacity: capacity}).Apply(spec); err != nil {
		return nil, err
	}
	if p.FirstRead && sample <= 1 {
		if err := spec.Variables["pc_skip_first_read"].Set(uint32(1)); err != nil {
			return nil, err
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, kernel.LoadError("page-cache policy "+name, err)
	}
	periodic, err := p.PeriodicProgram(coll)
	if err != nil {
		coll.Close()
		return nil, err
	}
	var a struct {
		Ret  int32
		N    uint32
		Hits uint64
	}
	if err := kernel.Call(coll.Programs["evict_init"], &a); err != nil || a.Ret != 0 {
		coll.Close()
		return nil, fmt.Errorf("policy %s init: %v (ret %d)", name, err, a.Ret)
	}
	return &policy{
		name: name, coll: coll, apply: coll.Programs["pc_apply"],
		batches: coll.Maps["pc_batches"], out: coll.Maps["pc_out"],
		periodic: periodic,
		buf:      make([]byte, 8+batchSize*eventSize),
		obuf:     make([]byte, 8+maxVictims*victimSize),
	}, nil
}

func (p *policy) Close() { p.coll.Close() }

// run applies evs (at most batchSize) in order, then asks for victims
// covering want pages (at most maxVictims of them).
func (p *policy) run(evs []Event, want int) ([]Victim, error) {
	le := binary.LittleEndian
	if len(evs) > batchSize {
		return nil, fmt.Errorf("%d events: at most %d per run", len(evs), batchSize)
	}
	le.PutUint32(p.buf[0:], uint32(len(evs)))
	for i, e := range evs {
		o := p.buf[8+i*eventSize:]
		o[0], o[1] = e.Op, e.Order
		le.PutUint32(o[4:], e.File)
		le.PutUint64(o[8:], e.Index)
		le.PutUint32(o[16:], e.TID)
		le.PutUint32(o[20:], e.TGID)
		le.PutUint32(o[24:], e.Nr)
		le.PutUint32(o[28:], e.Read)
	}
	// The whole struct pc_batch is written: records past n are stale and
	// never read.
	if err := p.batches.Update(uint32(0), p.buf, ebpf.UpdateAny); err != nil {
		return nil, fmt.Errorf("write events: %w", err)
	}
	a := runArgs{Want: uint32(min(want, 1<<30))}
	if err := kernel.Call(p.apply, &a); err != nil {
		return nil, err
	}
	if a.Ret != 0 {
		return nil, fmt.Errorf("pc_apply: error %d", a.Ret)
	}
	if p.periodic != nil && len(evs) > 0 {
		// Cheap when there is nothing to do: LHD returns unless
		// lhd_reconf_every accesses passed since its last rebuild.
		var pa runArgs
		if err := kernel.Call(p.periodic, &pa); err != nil {
			return nil, fmt.Errorf("evict_periodic: %w", err)
		}
	}
	if a.Got == 0 {
		return nil, nil
	}
	if err := p.out.Lookup(uint32(0), p.obuf); err != nil {
		return nil, fmt.Errorf("read victims: %w", err)
	}
	vs := make([]Victim, 0, a.Got)
	for i := range int(min(a.Got, maxVictims)) {
		o := p.obuf[8+i*victimSize:]
		key := le.Uint64(o)
		vs = append(vs, Victim{File: uint32(key >> 32), Index: uint32(key), Pages: le.Uint32(o[8:])})
	}
	return vs, nil
}

func (p *policy) stats() (map[string]uint64, error) {
	st, err := percpu.Sum(p.coll.Maps["pc_apply_stats"], applyStatNames)
	if err != nil {
		return nil, err
	}
	ev, err := percpu.Sum(p.coll.Maps["evict_stats"], evict.StatNames)
	if err != nil {
		return nil, err
	}
	for k, v := range ev {
		st["policy_"+k] = v
	}
	return st, nil
}

// SimPolicies are the agent's policies that a trace can be replayed under
// as they are: offered, with a replay object, and needing no scanner ids
// (get-scan and scan-only need the run's).
func SimPolicies() []string {
	var names []string
	for _, n := range evict.Names(evict.PageCache) {
		if p, err := evict.Lookup(n, evict.Replay); err == nil && !p.ScanIDs {
			names = append(names, n)
		}
	}
	return names
}
