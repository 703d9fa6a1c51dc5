// Package kern loads the precompiled, ahead-of-time verified operator
// templates of `cistern query` (bpf/query/*.bpf.c) specialised by a Config,
// attaches them and exposes their ring buffer, counters and partial
// aggregates. It knows nothing about SQL: the planner decides the Config.
package kern

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Slot layout shared with bpf/query/query.bpf.h.
const (
	NSlot   = 32
	NSaved  = 16
	JKey    = 31
	HalfKey = 16 // where an entry or exit half carries its join key
	MaxCl   = 6
	MaxV    = 4
	MaxProj = 16
	MaxKey  = 4
	NHist   = 64
)

// Emit modes (q_emit).
const (
	EmitNone = 0 // count only: event-rate sampling
	EmitFull = 1 // MVSF: the whole record
	EmitProj = 2
	EmitAgg  = 3
)

// Record kinds in the ring buffer.
const (
	KindFull  = 0
	KindEnter = 1
	KindExit  = 2
	KindProj  = 3 // projected: implied by the plan, no kind slot in the ring
)

// Op is a filter comparison (q_cl_op).
type Op uint32

const (
	OpEQ Op = iota
	OpNE
	OpLT
	OpLE
	OpGT
	OpGE
	OpULT
	OpULE
	OpUGT
	OpUGE
)

// Stat indexes of q_stats.
const (
	StEvents = iota
	StMatched
	StLostRB
	StLostAgg
	StLostJoin
	StEmitted
	StEntries // entry halves, counted only when nothing is emitted (sampling)
	stN
)

// Clause is one pushed-down comparison: (slot & Mask) Op Vals (IN: any of
// Vals for OpEQ, none of them for OpNE).
type Clause struct {
	Slot  int
	Op    Op
	Mask  uint64
	Vals  []uint64
	Enter bool // the entry half holds the slot: check it before the join
}

// Config specialises one table's template.
type Config struct {
	Object     string // see Objects
	Emit       int
	Join       bool
	Clauses    []Clause
	Proj       []int
	Keys       []int
	AggSlot    int
	AggSigned  bool
	Hist       bool
	NeedComm   bool
	NeedCgroup bool
	FullSlots  int    // slots a whole record carries (EmitFull); 0: all
	NeedArgs   bool   // syscalls: read arg0-arg5 at entry
	Saved      int    // Join: entry slots kept per key (0..Saved-1); 0: NSaved
	WakeBytes  uint32 // wake the reader when this many ring bytes wait; 0: RingBytes/8, at most 256 KiB
	RingBytes  uint32 // power of two, >= 4096
	Binary     string // uprobe only
	Symbol     string
}

type attach struct {
	prog  string
	group string // tracepoint group, or "raw_tp", "uprobe"/"uretprobe"
	name  string
}

type object struct {
	load   func() (*ebpf.CollectionSpec, error)
	attach []attach
	joined bool
	// cgroupFirst: both halves run in the task's context and check
	// q_cgroup_only first (q_foreign), so a plan that admits one cgroup
	// only can have other tasks' events turned away before any work.
	cgroupFirst bool
}

// Objects are the templates by table.
var objects = map[string]object{
	"syscalls":     {loadSyscalls, []attach{{"q_sys_enter", "raw_tp", "sys_enter"}, {"q_sys_exit", "raw_tp", "sys_exit"}}, true, true},
	"uprobe":       {loadUprobe, []attach{{"q_uprobe_enter", "uprobe", ""}, {"q_uprobe_exit", "uretprobe", ""}}, true, false},
	"sched_switch": {loadSchedSwitch, []attach{{"q_sched_switch", "sched", "sched_switch"}}, false, false},
	"process_exec": {loadProcessExec, []attach{{"q_process_exec", "sched", "sched_process_exec"}}, false, false},
	"process_exit": {loadProcessExit, []attach{{"q_process_exit", "sched", "sched_process_exit"}}, false, false},
	"page_cache":   {loadPageCache, []attach{{"q_page_add", "filemap", "mm_filemap_add_to_page_cache"}, {"q_page_delete", "filemap", "mm_filemap_delete_from_page_cache"}}, false, false},
	"block_io":     {loadBlockIo, []attach{{"q_block_issue", "block", "block_rq_issue"}, {"q_block_complete", "block", "block_rq_complete"}}, true, false},
	"tcp_state":    {loadTcpState, []attach{{"q_tcp_state", "sock", "inet_sock_set_state"}}, false, false},
}

// Joined reports whether obj has entry and exit halves.
func Joined(obj string) bool { return objects[obj].joined }

// Prog is a loaded, attached specialisation.
type Prog struct {
	Cfg   Config
	coll  *ebpf.Collection
	links []link.Link
	rb    *ringbuf.Reader
	epoch uint64
	// reported holds the per-CPU values of the epoch drained last, by
	// q_agg key: its entries stay in the map until the next drain, which
	// folds in what a program that read the old epoch added after the read.
	reported map[string][]AggVal
	late     atomic.Uint64
}

// VerifierError says the kernel refused the specialisation.
type VerifierError struct{ Err error }

func (e *VerifierError) Error() string { return "verifier: " + e.Err.Error() }
func (e *VerifierError) Unwrap() error { return e.Err }

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func (c *Config) vars() (map[string]any, error) {
	if len(c.Clauses) > MaxCl || len(c.Proj) > MaxProj || len(c.Keys) > MaxKey {
		return nil, fmt.Errorf("kern: config exceeds template bounds")
	}
	var slot, op, enter, nv [MaxCl]uint32
	var mask [MaxCl]uint64
	var vals [MaxCl * MaxV]uint64
	for i, cl := range c.Clauses {
		if len(cl.Vals) == 0 || len(cl.Vals) > MaxV {
			return nil, fmt.Errorf("kern: clause %d has %d values", i, len(cl.Vals))
		}
		slot[i], op[i], enter[i], nv[i], mask[i] = uint32(cl.Slot), uint32(cl.Op), b2u(cl.Enter), uint32(len(cl.Vals)), cl.Mask
		copy(vals[i*MaxV:], cl.Vals)
	}
	var proj [MaxProj]uint32
	for i, s := range c.Proj {
		proj[i] = uint32(s)
	}
	var keys [MaxKey]uint32
	for i, s := range c.Keys {
		keys[i] = uint32(s)
	}
	wake := c.WakeBytes
	if wake == 0 {
		wake = min(c.RingBytes/8, 256<<10)
	}
	saved := uint32(c.Saved)
	if saved == 0 || saved > NSaved {
		saved = NSaved
	}
	full := uint32(c.FullSlots)
	if full == 0 || full > NSlot {
		full = NSlot
	}
	return map[string]any{
		"q_nfull": full, "q_emit": uint32(c.Emit), "q_join": b2u(c.Join), "q_self": uint32(os.Getpid()),
		"q_need_comm": b2u(c.NeedComm), "q_need_cgroup": b2u(c.NeedCgroup), "q_need_args": b2u(c.NeedArgs), "q_nsaved": saved,
		"q_wake_bytes": wake,
		"q_ncl":        uint32(len(c.Clauses)), "q_cl_slot": slot, "q_cl_op": op, "q_cl_enter": enter,
		"q_cl_nv": nv, "q_cl_mask": mask, "q_cl_val": vals,
		"q_nproj": uint32(len(c.Proj)), "q_proj": proj,
		"q_nkey": uint32(len(c.Keys)), "q_key": keys,
		"q_aggslot": uint32(c.AggSlot), "q_agg_signed": b2u(c.AggSigned), "q_hist": b2u(c.Hist),
		"q_cgroup_only": c.cgroupOnly(),
	}, nil
}

// slotCgroup is the cgroup id's slot (bpf/query/query.bpf.h).
const slotCgroup = 3

// cgroupOnly is the one cgroup id a joined plan admits (a pushed entry
// clause cgroup_id = X), for templates that check it first; 0: none.
func (c *Config) cgroupOnly() uint64 {
	if !c.Join || !objects[c.Object].cgroupFirst {
		return 0
	}
	for _, cl := range c.Clauses {
		if cl.Slot == slotCgroup && cl.Enter && cl.Op == OpEQ && len(cl.Vals) == 1 && cl.Mask == ^uint64(0) && cl.Vals[0] != 0 {
			return cl.Vals[0]
		}
	}
	return 0
}

// Load specialises, verifies and attaches cfg. A *VerifierError means the
// kernel refused this specialisation (the planner then tries the next plan).
func Load(cfg Config) (*Prog, error) {
	obj, ok := objects[cfg.Object]
	if !ok {
		return nil, fmt.Errorf("kern: no template for %q", cfg.Object)
	}
	spec, err := obj.load()
	if err != nil {
		return nil, err
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = 1 << 22
	}
	vars, err := cfg.vars()
	if err != nil {
		return nil, err
	}
	for name, v := range vars {
		sv, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("kern: template %s lacks %s", cfg.Object, name)
		}
		if err := sv.Set(v); err != nil {
			return nil, fmt.Errorf("kern: set %s: %w", name, err)
		}
	}
	spec.Maps["q_rb"].MaxEntries = cfg.RingBytes
	if cfg.Emit == EmitAgg {
		// hash only the epoch and the plan's key slots, and keep the 64
		// histogram buckets only when asked: raw bytes, no BTF types
		agg := spec.Maps["q_agg"]
		agg.KeySize, agg.Key, agg.Value = uint32(8*(1+len(cfg.Keys))), nil, nil
		if !cfg.Hist {
			agg.ValueSize = uint32(binary.Size(aggSmall{}))
		}
	}
	if n := vars["q_nsaved"].(uint32); n < NSaved {
		// a smaller element per in-flight entry: raw bytes, no BTF type
		inf := spec.Maps["q_inflight"]
		inf.ValueSize, inf.Key, inf.Value = 8*n, nil, nil
	}
	// the verifier log is fetched only when a load fails: --explain quotes its reason
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, &VerifierError{err}
		}
		return nil, err
	}
	p := &Prog{Cfg: cfg, coll: coll}
	if err := p.attach(obj); err != nil {
		p.Close()
		return nil, err
	}
	if cfg.Emit != EmitNone && cfg.Emit != EmitAgg || (obj.joined && !cfg.Join && cfg.Emit != EmitNone) {
		if p.rb, err = ringbuf.NewReader(coll.Maps["q_rb"]); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

func (p *Prog) attach(obj object) error {
	var ex *link.Executable
	for _, a := range obj.attach {
		prog := p.coll.Programs[a.prog]
		var l link.Link
		var err error
		switch a.group {
		case "uprobe", "uretprobe":
			if ex == nil {
				if ex, err = link.OpenExecutable(p.Cfg.Binary); err != nil {
					return fmt.Errorf("uprobe %s: %w", p.Cfg.Binary, err)
				}
			}
			if a.group == "uprobe" {
				l, err = ex.Uprobe(p.Cfg.Symbol, prog, nil)
			} else {
				l, err = ex.Uretprobe(p.Cfg.Symbol, prog, nil)
			}
		case "raw_tp":
			l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: a.name, Program: prog})
		default:
			l, err = link.Tracepoint(a.group, a.name, prog, nil)
		}
		if err != nil {
			return fmt.Errorf("attach %s: %w", a.prog, err)
		}
		p.links = append(p.links, l)
	}
	return nil
}

// Reader is the ring buffer reader, nil when the plan emits nothing.
func (p *Prog) Reader() *ringbuf.Reader { return p.rb }

// Stats sums q_stats over CPUs.
func (p *Prog) Stats() [stN]uint64 {
	var out [stN]uint64
	m := p.coll.Maps["q_stats"]
	for i := uint32(0); i < stN; i++ {
		var per []uint64
		if err := m.Lookup(i, &per); err == nil {
			for _, v := range per {
				out[i] += v
			}
		}
	}
	return out
}

// AggVal mirrors struct q_aggval (q_agg's key is the epoch and the plan's
// key slots: struct q_aggkey cut to the map's key size).
type AggVal struct {
	Count, Sum, Min, Max uint64
	Hist                 [NHist]uint64
}

// aggSmall is q_agg's value when the plan keeps no histogram.
type aggSmall struct{ Count, Sum, Min, Max uint64 }

// Partial is one key's per-CPU partial aggregates.
type Partial struct {
	K   [MaxKey]uint64
	Per []AggVal
}

// SwapEpoch starts a new aggregation epoch and returns the partials of the
// previous one. An update racing with the swap (a program that read the old
// epoch and was preempted past the grace period, or that added to an entry
// after drain read it) is not lost: it is folded into the next swap's
// partials and counted in LateUpdates.
func (p *Prog) SwapEpoch() ([]Partial, error) {
	old := p.epoch
	p.epoch++
	if err := p.coll.Maps["q_ctl"].Put(uint32(0), p.epoch); err != nil {
		return nil, err
	}
	// programs that read the old epoch finish within microseconds, unless
	// preempted: what they add later is caught by the next drain
	time.Sleep(time.Millisecond)
	return p.drain(old)
}

// LateUpdates is how many aggregated events reached an epoch after it was
// drained; each was reported with the next window instead.
func (p *Prog) LateUpdates() uint64 { return p.late.Load() }

// drain returns epoch's partials, leaving its entries in place, and folds
// into them what was added to older epochs' entries since they were
// reported, then deletes those.
func (p *Prog) drain(epoch uint64) ([]Partial, error) {
	m := p.coll.Maps["q_agg"]
	var out []Partial
	byKey := map[string]int{} // key slots (without the epoch) -> index in out
	reported := map[string][]AggVal{}
	var k []byte // the epoch, then one slot per key (the map's key size)
	var big []AggVal
	var small []aggSmall
	var stale [][]byte
	it := m.Iterate()
	for {
		var ok bool
		if p.Cfg.Hist {
			ok = it.Next(&k, &big)
		} else {
			ok = it.Next(&k, &small)
		}
		if !ok {
			break
		}
		if len(k) < 8 {
			continue
		}
		ep := binary.LittleEndian.Uint64(k)
		if ep > epoch {
			continue
		}
		var per []AggVal
		if p.Cfg.Hist {
			per = append([]AggVal(nil), big...)
		} else {
			per = make([]AggVal, len(small))
			for i, v := range small {
				per[i] = AggVal{Count: v.Count, Sum: v.Sum, Min: v.Min, Max: v.Max}
			}
		}
		if ep == epoch {
			reported[string(k)] = per
		} else {
			stale = append(stale, append([]byte(nil), k...))
			prev := p.reported[string(k)]
			var late []AggVal
			for i, v := range per {
				var o AggVal
				if i < len(prev) {
					o = prev[i]
				}
				if d, ok := lateDelta(v, o); ok {
					late = append(late, d)
					p.late.Add(d.Count)
				}
			}
			if per = late; len(per) == 0 {
				continue
			}
		}
		ks := string(k[8:])
		if i, ok := byKey[ks]; ok {
			out[i].Per = append(out[i].Per, per...) // merged like another CPU's
			continue
		}
		pt := Partial{Per: per}
		for i := 0; i < MaxKey && 8*(i+2) <= len(k); i++ {
			pt.K[i] = binary.LittleEndian.Uint64(k[8*(i+1):])
		}
		byKey[ks] = len(out)
		out = append(out, pt)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	for _, k := range stale {
		_ = m.Delete(k)
	}
	p.reported = reported
	return out, nil
}

// lateDelta is what one CPU's entry gained since it was reported as o.
// Count, sum and histogram are exact; so are min and max when the late
// events moved them or there was only one (its value is the sum's gain);
// otherwise they are bounded by the late events' mean.
func lateDelta(v, o AggVal) (AggVal, bool) {
	if v.Count <= o.Count {
		return AggVal{}, false
	}
	if o.Count == 0 {
		return v, true
	}
	d := AggVal{Count: v.Count - o.Count, Sum: v.Sum - o.Sum}
	for i := range d.Hist {
		d.Hist[i] = v.Hist[i] - o.Hist[i]
	}
	mean := d.Sum / d.Count // one late event: its value exactly
	if d.Count > 1 && int64(d.Sum) < 0 {
		mean = uint64(int64(d.Sum) / int64(d.Count)) // signed columns
	}
	d.Min, d.Max = mean, mean
	if v.Min != o.Min {
		d.Min = v.Min
	}
	if v.Max != o.Max {
		d.Max = v.Max
	}
	return d, true
}

// Close detaches and frees everything.
func (p *Prog) Close() {
	for _, l := range p.links {
		l.Close()
	}
	if p.rb != nil {
		p.rb.Close()
	}
	if p.coll != nil {
		p.coll.Close()
	}
}

// Detach removes the hooks so no new events arrive; maps stay readable.
func (p *Prog) Detach() {
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
}

// SkippedRuns is how many times the kernel skipped the attached programs
// because a run of the same program (or, for the syscalls/ tracepoints,
// any BPF program) was under way on that CPU: on a kernel that runs them
// preemptible (7.x's lazy or full preemption) a task preempted inside one
// holds that guard, and the events of the tasks that run meanwhile are
// lost. An upper bound: events the filter would have dropped count too.
func (p *Prog) SkippedRuns() uint64 {
	var n uint64
	for _, a := range objects[p.Cfg.Object].attach {
		if st, err := p.coll.Programs[a.prog].Stats(); err == nil {
			n += st.RecursionMisses
		}
	}
	return n
}

// RunStat is one program's measured cost (BPF run-time statistics).
type RunStat struct {
	Prog     string
	Runs     uint64
	NsPerRun float64
}

// RunStats reads the run-time statistics of the attached programs; they
// are non-zero only while statistics are enabled (EnableRunStats).
func (p *Prog) RunStats() []RunStat {
	var out []RunStat
	for _, a := range objects[p.Cfg.Object].attach {
		prog := p.coll.Programs[a.prog]
		st, err := prog.Stats()
		if err != nil || st.RunCount == 0 {
			continue
		}
		out = append(out, RunStat{a.prog, st.RunCount, float64(st.Runtime.Nanoseconds()) / float64(st.RunCount)})
	}
	return out
}

// EnableRunStats turns the kernel's BPF run-time statistics on until the
// returned closer is closed (they cost two clock reads per program run).
func EnableRunStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}
