package pagecache

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

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
	pcEBUSY    = 16   // PC_EBUSY

	opAdd = 1
	opDel = 2
	opAcc = 3
)

// applyStatNames are pc_apply_stats, in enum pc_apply_stat order.
var applyStatNames = []string{"added", "readded", "removed", "del_unknown", "acc_hits", "victims", "full", "first_reads", "read_again",
	"applied", "lock_busy", "swept", "wakeups"}

// Event is one event for the policy (struct pc_event).
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

// policy is a loaded policy object: the policy, the tracepoint programs
// that apply events to it in the kernel (track.bpf.h, apply.bpf.h) and
// pc_apply, the agent's call for victims.
type policy struct {
	name    string
	coll    *ebpf.Collection
	apply   *ebpf.Program
	batches *ebpf.Map
	out     *ebpf.Map
	wake    *ringbuf.Reader
	// The policy's globals, read and written through the .bss mapping
	// (no syscall): pages tracked, the wake threshold and flag, and the
	// pages the agent's own evictions deleted.
	used, wakePages, woken, selfPages *ebpf.Variable
	// sizeHint: evict_size_hint, the pages the agent keeps on average
	// (nil where the object has none); hint, the value last set.
	sizeHint         *ebpf.Variable
	hint             uint64
	batchN           int           // n of the batch last written to pc_batches
	skipFirstRead    bool          // pc_skip_first_read: an add's first read is not a hit
	accesses         bool          // the policy takes accesses (evict.Policy.Accesses)
	busy, busyGaveUp atomic.Uint64 // pc_apply found the lock held; gave up after maxBusy
	buf              []byte
	obuf             []byte
}

type runArgs struct {
	Ret   int32
	Want  uint32
	Got   uint32
	Taken uint32
}

// trackConfig is how the tracepoint programs filter: the memory cgroup
// (kernfs id, 0: any) and the access sampling (0 or 1: every read).
type trackConfig struct {
	memcg  uint64
	sample uint32
	// scanPages: pc_scan_pages (Config.ScanReadPages)
	scanPages uint32
}

// openPolicy loads p's page-cache object with room for capacity folios,
// runs its init and starts its sweep timer. Nothing is attached
// (newTracker does that).
func openPolicy(p evict.Policy, capacity uint32, tc trackConfig) (_ *policy, err error) {
	name := p.Name
	spec, err := p.Spec(evict.PageCache)
	if err != nil {
		return nil, err
	}
	if err := (evict.Config{Policy: name, Capacity: capacity}).Apply(spec); err != nil {
		return nil, err
	}
	sample := max(tc.sample, 1)
	vars := map[string]any{"pc_memcg_id": tc.memcg, "pc_want_access": uint32(0), "pc_access_mask": sample - 1, "pc_scan_pages": tc.scanPages}
	if p.Accesses {
		vars["pc_want_access"] = uint32(1)
	}
	skipFirst := p.FirstRead && sample == 1
	if skipFirst {
		vars["pc_skip_first_read"] = uint32(1)
	}
	for k, v := range vars {
		if err := spec.Variables[k].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", k, err)
		}
	}
	keepPrograms(spec, p.Accesses, false)
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, kernel.LoadError("page-cache policy "+name, err)
	}
	pol := &policy{
		name: name, coll: coll, apply: coll.Programs["pc_apply"], skipFirstRead: skipFirst, accesses: p.Accesses,
		batches: coll.Maps["pc_batches"], out: coll.Maps["pc_out"],
		used: coll.Variables["evict_used_bytes"], wakePages: coll.Variables["pc_wake_pages"],
		woken: coll.Variables["pc_woken"], selfPages: coll.Variables["pc_self_pages"], sizeHint: coll.Variables["evict_size_hint"],
		buf:  make([]byte, 8+batchSize*eventSize),
		obuf: make([]byte, 8+maxVictims*victimSize),
	}
	defer func() {
		if err != nil {
			pol.Close()
		}
	}()
	var a struct {
		Ret  int32
		N    uint32
		Hits uint64
	}
	if err := kernel.Call(coll.Programs["evict_init"], &a); err != nil || a.Ret != 0 {
		return nil, fmt.Errorf("policy %s init: %v (ret %d)", name, err, a.Ret)
	}
	var sa runArgs
	if err := kernel.Call(coll.Programs["pc_start"], &sa); err != nil || sa.Ret != 0 {
		return nil, fmt.Errorf("policy %s: start the sweep timer: %v (ret %d)", name, err, sa.Ret)
	}
	if pol.wake, err = ringbuf.NewReader(coll.Maps["pc_wake"]); err != nil {
		return nil, fmt.Errorf("open the wake ring buffer: %w", err)
	}
	return pol, nil
}

// Close unloads the object; its maps (and the sweep timer with them) go
// once nothing holds them.
func (p *policy) Close() {
	if p.wake != nil {
		p.wake.Close()
	}
	p.coll.Close()
}

// u64 reads one of the policy's globals (0 if it cannot).
func u64(v *ebpf.Variable) uint64 {
	var x uint64
	if v != nil {
		v.Get(&x)
	}
	return x
}

// tracked is how many pages the policy tracks.
func (p *policy) tracked() uint64 { return u64(p.used) }

// setSizeHint tells the policy the pages the agent keeps on average, when
// that moved by more than 1 % (a policy whose segments are shares of the
// cache resizes them at its next eviction: evict_size_hint).
func (p *policy) setSizeHint(pages uint64) error {
	if p.sizeHint == nil || pages == 0 || (p.hint != 0 && max(pages, p.hint)-min(pages, p.hint) <= p.hint/100) {
		return nil
	}
	if err := p.sizeHint.Set(pages); err != nil {
		return fmt.Errorf("set the policy's size hint: %w", err)
	}
	p.hint = pages
	return nil
}

// maxBusy bounds how long run waits for the policy's lock: a holder is a
// tracepoint program applying a short queue, so this is only reached when
// the holder's CPU was taken from it.
const maxBusy = 100 * time.Millisecond

// run queues evs (at most batchSize) for the policy, then asks for victims
// covering want pages (at most maxVictims of them); it returns how many of
// evs the policy's queue took (the rest: run them again). While a
// tracepoint program holds the policy's lock it tries again (counted), and
// after maxBusy gives up for this time (counted): no victims, nothing
// taken.
func (p *policy) run(evs []Event, want int) ([]Victim, int, error) {
	le := binary.LittleEndian
	if len(evs) > batchSize {
		return nil, 0, fmt.Errorf("%d events: at most %d per run", len(evs), batchSize)
	}
	if err := p.writeBatch(evs); err != nil {
		return nil, 0, err
	}
	a := runArgs{Want: uint32(min(want, 1<<30))}
	for t0 := time.Now(); ; {
		if err := kernel.Call(p.apply, &a); err != nil {
			return nil, 0, err
		}
		if a.Ret != -pcEBUSY { // busy: nothing of the batch was taken
			break
		}
		p.busy.Add(1)
		if time.Since(t0) > maxBusy {
			p.busyGaveUp.Add(1)
			return nil, 0, nil
		}
		time.Sleep(20 * time.Microsecond)
		a = runArgs{Want: a.Want}
	}
	if a.Ret != 0 {
		return nil, 0, fmt.Errorf("pc_apply: error %d", a.Ret)
	}
	taken := int(min(a.Taken, uint32(len(evs))))
	if a.Got == 0 {
		return nil, taken, nil
	}
	if err := p.out.Lookup(uint32(0), p.obuf); err != nil {
		return nil, taken, fmt.Errorf("read victims: %w", err)
	}
	vs := make([]Victim, 0, a.Got)
	for i := range int(min(a.Got, maxVictims)) {
		o := p.obuf[8+i*victimSize:]
		key := le.Uint64(o)
		vs = append(vs, Victim{File: uint32(key >> 32), Index: uint32(key), Pages: le.Uint32(o[8:])})
	}
	return vs, taken, nil
}

// writeBatch puts evs in pc_batches; an empty batch is written only when
// the last one was not (a batch is 128 KiB).
func (p *policy) writeBatch(evs []Event) error {
	if len(evs) == 0 && p.batchN == 0 {
		return nil
	}
	le := binary.LittleEndian
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
		return fmt.Errorf("write events: %w", err)
	}
	p.batchN = len(evs)
	return nil
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
	st["tracked_pages"] = p.tracked()
	st["size_hint_pages"] = p.hint
	st["apply_busy_retries"] = p.busy.Load()
	st["apply_busy_gave_up"] = p.busyGaveUp.Load()
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
