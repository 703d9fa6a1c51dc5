package kernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Feature is one thing a probe asks the kernel: one row of the table.
type Feature struct {
	Name  string       // short and stable: "bpf_loop"
	Since string       // the first Linux release that has it ("" if any)
	What  string       // a few words for people
	Probe func() error // nil when the kernel has it
}

// The probes. Each runs at most once per process and returns nil when the
// kernel has the feature, or an error naming it, wrapping ErrMissing when
// the kernel lacks it, with the release that has it when it is a matter of
// version. Their names, releases and descriptions are in table.
var (
	BTF        func() error // the kernel's own BTF, which CO-RE and tp_btf programs need
	Tracepoint func() error
	RawTP      func() error
	TPBTF      func() error // loaded for sys_enter
	Uprobe     func() error // the program type and the uprobe PMU (CONFIG_UPROBE_EVENTS)
	// UprobeMulti: uprobe_multi links, one link for many addresses; without,
	// capture attaches one perf-event uprobe per address.
	UprobeMulti    func() error
	XDP            func() error
	RingBuf        func() error
	MmapArray      func() error // arrays user space maps (BPF_F_MMAPABLE)
	Atomics        func() error // fetch-add and compare-and-exchange, which the pool's allocator and the accumulating channel use
	ForEachMapElem func() error
	Timer          func() error // the accumulating channel's flush sweeper
	BPFLoop        func() error // which every policy and batch program iterates with
	XDPLoadBytes   func() error
	XDPLiveFrames  func() error // which the kernel load generator of bench kv (xdp-trafficgen's technique) sends with
	// SyscallProgram: Cistern runs its user-invoked programs as XDP
	// through BPF_PROG_TEST_RUN instead (bpf/include/cistern/call.bpf.h);
	// only the doctor reports this one.
	SyscallProgram func() error
	StructOps      func() error
	// StructOpsLink: struct_ops maps registered through a link unregister
	// when it closes; without, a map registers when its value is written
	// and unregisters when it is deleted (see AdaptStructOps).
	StructOpsLink func() error
	// Cachestat: which the page-cache agent checks its evictions with;
	// without, it uses mincore(2) on a mapping of the file (residency only).
	Cachestat func() error
	// TCX: without, internal/tc attaches with a clsact qdisc and a cls_bpf
	// filter.
	TCX func() error
	// SockmapVerdict: an sk_skb verdict program without a stream parser
	// (BPF_SK_SKB_VERDICT) on a SOCKHASH, which Kerby-KV's TCP path uses
	// (TCP's read_sock-based verdict).
	SockmapVerdict func() error
	// FilemapGetPages: the page-cache agent's read signal; without, it
	// watches read(2) and pread64(2).
	FilemapGetPages func() error
	// SockmapSelfRedirect: a behaviour, not a release (probeSockmapSelfRedirect):
	// a segment an sk_skb verdict redirects to its own socket is accounted
	// as read even when the verdict runs during the socket's first read.
	// Without it kv's TCP GETs stay opt-in: memcached could spin.
	SockmapSelfRedirect func() error
	Kprobe              func() error // Cistern never needs kprobes: the doctor reports them
	Fentry              func() error // nor fentry
)

// table is every feature, one row each, in the order the doctor reports
// them: the probe it defines, its name, the release that has it (written
// here only) and what it is, and the raw probe, which returns nil,
// ebpf.ErrNotSupported or errTooOld (too old a kernel), an error wrapping
// ErrMissing with its own reason, or another error.
var table = []struct {
	probe *func() error
	Feature
	raw func() error
}{
	{&BTF, Feature{Name: "btf", What: "kernel BTF (" + VmlinuxPath + ")"}, probeBTF},
	{&Tracepoint, Feature{Name: "tracepoint", Since: "4.7", What: "tracepoint programs"}, probeTracepoint},
	{&RawTP, Feature{Name: "raw_tp", Since: "4.17", What: "raw tracepoint programs"}, probeRawTP},
	{&TPBTF, Feature{Name: "tp_btf", Since: "5.5", What: "BTF-typed tracepoint programs"}, probeTPBTF},
	{&Uprobe, Feature{Name: "uprobe", Since: "4.1", What: "uprobes"}, probeUprobe},
	{&UprobeMulti, Feature{Name: "uprobe_multi", Since: "6.6", What: "uprobe_multi links"}, features.HaveBPFLinkUprobeMulti},
	{&XDP, Feature{Name: "xdp", Since: "4.8", What: "XDP programs"}, probeXDP},
	{&RingBuf, Feature{Name: "ringbuf", Since: "5.8", What: "ring buffer maps"}, probeRingBuf},
	{&MmapArray, Feature{Name: "mmap_array", Since: "5.5", What: "mmapable arrays"}, probeMmapArray},
	{&Atomics, Feature{Name: "atomics", Since: "5.12", What: "BPF atomic fetch and compare-and-exchange"}, probeAtomics},
	{&ForEachMapElem, Feature{Name: "for_each_map_elem", Since: "5.13", What: "the bpf_for_each_map_elem helper"}, probeForEachMapElem},
	{&Timer, Feature{Name: "bpf_timer", Since: "5.15", What: "bpf_timer"}, probeTimer},
	{&BPFLoop, Feature{Name: "bpf_loop", Since: "5.17", What: "the bpf_loop helper"}, probeBPFLoop},
	{&XDPLoadBytes, Feature{Name: "xdp_load_bytes", Since: "5.18", What: "bpf_xdp_load_bytes and bpf_xdp_store_bytes"}, probeXDPLoadBytes},
	{&XDPLiveFrames, Feature{Name: "xdp_live_frames", Since: "5.18", What: "BPF_PROG_RUN sending XDP frames (live frames)"}, probeXDPLiveFrames},
	{&SyscallProgram, Feature{Name: "syscall_prog", Since: "5.14", What: "SYSCALL programs"}, probeSyscallProgram},
	{&StructOps, Feature{Name: "struct_ops", Since: "5.6", What: "struct_ops maps"}, probeStructOps},
	{&StructOpsLink, Feature{Name: "struct_ops_link", Since: "6.4", What: "struct_ops links"}, probeStructOpsLink},
	{&Cachestat, Feature{Name: "cachestat", Since: "6.5", What: "the cachestat(2) system call"}, probeCachestat},
	{&TCX, Feature{Name: "tcx", Since: "6.6", What: "TCX links"}, probeTCX},
	{&SockmapVerdict, Feature{Name: "sockmap_verdict", Since: "5.15", What: "sk_skb verdict programs on a sockmap, without a stream parser"}, probeSockmapVerdict},
	{&FilemapGetPages, Feature{Name: "filemap_get_pages", Since: "6.10", What: "the mm_filemap_get_pages tracepoint"}, probeFilemapGetPages},
	{&SockmapSelfRedirect, Feature{Name: "sockmap_self_redirect", What: "a segment an sk_skb verdict redirects to its own socket, counted as read"}, probeSockmapSelfRedirect},
	{&Kprobe, Feature{Name: "kprobe", Since: "4.1", What: "kprobes"}, probeKprobe},
	{&Fentry, Feature{Name: "fentry", Since: "5.5", What: "fentry programs"}, probeFentry},
}

func init() {
	for i := range table {
		r := &table[i]
		*r.probe = sync.OnceValue(func() error { return r.answer(r.raw()) })
		r.Probe = *r.probe
	}
}

// answer is the probe's error as users read it: the feature's name, and
// the release that has it when the kernel is too old.
func (f Feature) answer(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, errTooOld):
		if f.Since == "" {
			return fmt.Errorf("%s: %w", f.What, ErrMissing)
		}
		return fmt.Errorf("%s: %w (needs Linux %s or newer)", f.What, ErrMissing, f.Since)
	}
	return fmt.Errorf("%s: %w", f.What, err)
}

// Features lists every feature, in the order the doctor reports them.
func Features() []Feature {
	out := make([]Feature, len(table))
	for i, r := range table {
		out[i] = r.Feature
	}
	return out
}

// Lookup is the named feature's row.
func Lookup(name string) (Feature, bool) {
	for _, r := range table {
		if r.Name == name {
			return r.Feature, true
		}
	}
	return Feature{}, false
}

// Has returns the named feature's probe result: nil when the kernel
// has it.
func Has(name string) error {
	if f, ok := Lookup(name); ok {
		return f.Probe()
	}
	return fmt.Errorf("kernel: no feature %q", name)
}

// probeKprobe attaches a minimal kprobe to do_sys_openat2.
func probeKprobe() error {
	return tryAttach(&ebpf.ProgramSpec{Type: ebpf.Kprobe}, func(p *ebpf.Program) (link.Link, error) {
		return link.Kprobe("do_sys_openat2", p, nil)
	})
}

// probeFentry attaches a minimal fentry program to do_sys_openat2.
func probeFentry() error {
	return tryAttach(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: "do_sys_openat2"},
		func(p *ebpf.Program) (link.Link, error) { return link.AttachTracing(link.TracingOptions{Program: p}) })
}

// tryAttach loads spec as a program that returns 0 and attaches it: any
// failure is the kernel's lack (ErrMissing, with its reason).
func tryAttach(spec *ebpf.ProgramSpec, attach func(*ebpf.Program) (link.Link, error)) error {
	spec.License = "GPL"
	spec.Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	prog, err := ebpf.NewProgram(spec)
	if err == nil {
		defer prog.Close()
		var l link.Link
		if l, err = attach(prog); err == nil {
			return l.Close()
		}
	}
	return fmt.Errorf("%w: %v", ErrMissing, err)
}

func probeBTF() error {
	if _, err := BTFSpec(); err != nil {
		return fmt.Errorf("%w: %v (boot a kernel built with CONFIG_DEBUG_INFO_BTF=y)", ErrMissing, err)
	}
	return nil
}

func probeTracepoint() error { return features.HaveProgramType(ebpf.TracePoint) }

func probeRawTP() error { return features.HaveProgramType(ebpf.RawTracepoint) }

// probeTPBTF loads one for sys_enter.
func probeTPBTF() error {
	if err := BTF(); err != nil {
		return err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "sys_enter", License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return err
	}
	return prog.Close()
}

// probeUprobe: the program type, and the kernel's uprobe PMU
// (CONFIG_UPROBE_EVENTS).
func probeUprobe() error {
	if err := features.HaveProgramType(ebpf.Kprobe); err != nil {
		return err
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/uprobe/type"); err != nil {
		return fmt.Errorf("%w (no uprobe PMU: CONFIG_UPROBE_EVENTS is off)", ErrMissing)
	}
	return nil
}

func probeXDP() error { return features.HaveProgramType(ebpf.XDP) }

func probeMmapArray() error { return features.HaveMapFlag(features.BPF_F_MMAPABLE) }

// atomicInsn is a 64-bit BPF_ATOMIC store on (r6 + 0) from r1 with the given
// operation in imm, decoded from the bytes clang emits, so the probe tries
// exactly the encoding the tree's objects carry.
func atomicInsn(op byte) asm.Instruction {
	raw := []byte{0xdb, 0x16, 0, 0, op, 0, 0, 0}
	var ins asm.Instruction
	if err := ins.Unmarshal(bytes.NewReader(raw), binary.LittleEndian, "linux"); err != nil {
		panic(fmt.Sprintf("kernel: decode atomic instruction: %v", err))
	}
	return ins
}

func probeForEachMapElem() error {
	return features.HaveProgramHelper(ebpf.XDP, asm.FnForEachMapElem)
}

// probeAtomics loads them in an XDP program.
func probeAtomics() error {
	// On a map value, as the pool uses them: Debian's 5.10 accepts these
	// instructions on the stack but refuses them on a map value ("BPF_STX
	// uses reserved fields").
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("probe map: %w", err)
	}
	defer m.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.R10, -4, asm.R1, asm.Word),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Reg(asm.R6, asm.R0),
			asm.Mov.Imm(asm.R1, 1),
			atomicInsn(0x01), // r1 = atomic_fetch_add((u64 *)(r6 + 0), r1)
			asm.Mov.Imm(asm.R0, 0),
			asm.Mov.Imm(asm.R1, 1),
			atomicInsn(0xf1),                         // r0 = cmpxchg((u64 *)(r6 + 0), r0, r1)
			asm.Mov.Imm(asm.R0, 2).WithSymbol("out"), // XDP_PASS
			asm.Return(),
		},
	})
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return errTooOld
		}
		return err
	}
	return prog.Close()
}

// probeSockmapVerdict attaches one.
func probeSockmapVerdict() error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockHash, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("SOCKHASH maps: %w", err)
	}
	defer m.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SkSKB, AttachType: ebpf.AttachSkSKBVerdict, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("sk_skb verdict programs: %w", err)
	}
	defer prog.Close()
	attach := link.RawAttachProgramOptions{Target: m.FD(), Program: prog, Attach: ebpf.AttachSkSKBVerdict}
	if err := link.RawAttachProgram(attach); err != nil {
		return fmt.Errorf("sk_skb verdict on a sockmap: %w", err)
	}
	return link.RawDetachProgram(link.RawDetachProgramOptions{Target: m.FD(), Program: prog, Attach: ebpf.AttachSkSKBVerdict})
}
