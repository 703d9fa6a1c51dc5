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

// BTF: the kernel's own BTF (/sys/kernel/btf/vmlinux), which CO-RE and
// tp_btf programs need.
var BTF = sync.OnceValue(func() error {
	if _, err := kernelBTF(); err != nil {
		return fmt.Errorf("kernel BTF: %w: %v (boot a kernel built with CONFIG_DEBUG_INFO_BTF=y)", ErrMissing, err)
	}
	return nil
})

// Tracepoint: tracepoint programs.
var Tracepoint = sync.OnceValue(func() error {
	return missing("tracepoint programs", "4.7", features.HaveProgramType(ebpf.TracePoint))
})

// RawTP: raw tracepoint programs (4.17).
var RawTP = sync.OnceValue(func() error {
	return missing("raw_tp programs", "4.17", features.HaveProgramType(ebpf.RawTracepoint))
})

// TPBTF: BTF-typed tracepoint programs (5.5), loaded for sys_enter.
var TPBTF = sync.OnceValue(func() error {
	if err := BTF(); err != nil {
		return fmt.Errorf("tp_btf programs: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "sys_enter", License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return missing("tp_btf programs", "5.5", err)
	}
	return prog.Close()
})

// Uprobe: uprobes through perf events (the kernel's uprobe PMU,
// CONFIG_UPROBE_EVENTS).
var Uprobe = sync.OnceValue(func() error {
	if err := features.HaveProgramType(ebpf.Kprobe); err != nil {
		return missing("uprobe programs", "4.1", err)
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/uprobe/type"); err != nil {
		return fmt.Errorf("uprobes: %w (no uprobe PMU: CONFIG_UPROBE_EVENTS is off)", ErrMissing)
	}
	return nil
})

// XDP: XDP programs.
var XDP = sync.OnceValue(func() error {
	return missing("XDP programs", "4.8", features.HaveProgramType(ebpf.XDP))
})

// MmapArray: arrays user space maps (BPF_F_MMAPABLE, 5.5).
var MmapArray = sync.OnceValue(func() error {
	return missing("mmapable arrays", "5.5", features.HaveMapFlag(features.BPF_F_MMAPABLE))
})

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

// ForEachMapElem: the bpf_for_each_map_elem helper (5.13).
var ForEachMapElem = sync.OnceValue(func() error {
	return missing("bpf_for_each_map_elem helper", "5.13", features.HaveProgramHelper(ebpf.XDP, asm.FnForEachMapElem))
})

// Atomics: BPF atomic operations that return the old value (fetch-add,
// compare-and-exchange; 5.12), which the pool's allocator and the
// accumulating channel use. Probed on the stack of an XDP program.
var Atomics = sync.OnceValue(func() error {
	// On a map value, as the pool uses them: Debian's 5.10 accepts these
	// instructions on the stack but refuses them on a map value ("BPF_STX
	// uses reserved fields").
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("BPF atomics: probe map: %w", err)
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
		if errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("BPF atomic fetch and compare-and-exchange: %w (needs Linux 5.12 or newer)", ErrMissing)
		}
		return fmt.Errorf("BPF atomics: %w", err)
	}
	return prog.Close()
})

// SockmapVerdict: an sk_skb verdict program without a stream parser
// (BPF_SK_SKB_VERDICT) on a SOCKHASH, which Kerby-KV's TCP path uses
// (5.15: TCP's read_sock-based verdict). Probed by attaching one.
var SockmapVerdict = sync.OnceValue(func() error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockHash, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return missing("SOCKHASH maps", "5.15", err)
	}
	defer m.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SkSKB, AttachType: ebpf.AttachSkSKBVerdict, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
	})
	if err != nil {
		return missing("sk_skb verdict programs", "5.15", err)
	}
	defer prog.Close()
	attach := link.RawAttachProgramOptions{Target: m.FD(), Program: prog, Attach: ebpf.AttachSkSKBVerdict}
	if err := link.RawAttachProgram(attach); err != nil {
		return missing("sk_skb verdict on a sockmap", "5.15", err)
	}
	return link.RawDetachProgram(link.RawDetachProgramOptions{Target: m.FD(), Program: prog, Attach: ebpf.AttachSkSKBVerdict})
})

// Feature is one thing a probe asks the kernel.
type Feature struct {
	Name  string       // short and stable: "bpf_loop"
	Since string       // the first Linux release that has it ("" if any)
	What  string       // a few words for people
	Probe func() error // nil when the kernel has it
}

// Features lists every probe of this package, in the order the doctor
// reports them.
func Features() []Feature {
	return []Feature{
		{"btf", "", "kernel BTF (/sys/kernel/btf/vmlinux)", BTF},
		{"tracepoint", "4.7", "tracepoint programs", Tracepoint},
		{"raw_tp", "4.17", "raw tracepoint programs", RawTP},
		{"tp_btf", "5.5", "BTF-typed tracepoint programs", TPBTF},
		{"uprobe", "4.1", "uprobes", Uprobe},
		{"xdp", "4.8", "XDP programs", XDP},
		{"ringbuf", "5.8", "ring buffer maps", RingBuf},
		{"mmap_array", "5.5", "mmapable arrays", MmapArray},
		{"atomics", "5.12", "BPF atomic fetch and compare-and-exchange", Atomics},
		{"for_each_map_elem", "5.13", "the bpf_for_each_map_elem helper", ForEachMapElem},
		{"bpf_timer", "5.15", "bpf_timer", Timer},
		{"bpf_loop", "5.17", "the bpf_loop helper", BPFLoop},
		{"xdp_load_bytes", "5.18", "bpf_xdp_load_bytes and bpf_xdp_store_bytes", XDPLoadBytes},
		{"xdp_live_frames", "5.18", "BPF_PROG_RUN sending XDP frames (live frames)", XDPLiveFrames},
		{"syscall_prog", "5.14", "SYSCALL programs", SyscallProgram},
		{"struct_ops", "5.6", "struct_ops maps", StructOps},
		{"struct_ops_link", "6.4", "struct_ops links", StructOpsLink},
		{"cachestat", "6.5", "the cachestat(2) system call", Cachestat},
		{"tcx", "6.6", "TCX links", TCX},
		{"sockmap_verdict", "5.15", "sk_skb verdict programs on a sockmap, without a stream parser", SockmapVerdict},
		{"filemap_get_pages", "6.10", "the mm_filemap_get_pages tracepoint", FilemapGetPages},
	}
}

// Has returns the named feature's probe result: nil when the kernel
// has it.
func Has(name string) error {
	for _, f := range Features() {
		if f.Name == name {
			return f.Probe()
		}
	}
	return fmt.Errorf("kernel: no feature %q", name)
}
