package kernel

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
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

// ForEachMapElem: the bpf_for_each_map_elem helper (5.13).
var ForEachMapElem = sync.OnceValue(func() error {
	return missing("bpf_for_each_map_elem helper", "5.13", features.HaveProgramHelper(ebpf.XDP, asm.FnForEachMapElem))
})

// Atomics: BPF atomic operations that return the old value (fetch-add,
// compare-and-exchange; 5.12), which the pool's allocator and the
// accumulating channel use. Probed on the stack of an XDP program.
var Atomics = sync.OnceValue(func() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.StoreMem(asm.R10, -8, asm.R0, asm.DWord),
			asm.Mov.Imm(asm.R1, 1),
			asm.CmpXchg.Mem(asm.R10, asm.R1, asm.DWord, -8),
			asm.Mov.Imm(asm.R1, 1),
			asm.FetchAdd.Mem(asm.R10, asm.R1, asm.DWord, -8),
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
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
		{"syscall_prog", "5.14", "SYSCALL programs", SyscallProgram},
		{"struct_ops", "5.6", "struct_ops maps", StructOps},
		{"struct_ops_link", "6.4", "struct_ops links", StructOpsLink},
		{"cachestat", "6.5", "the cachestat(2) system call", Cachestat},
		{"tcx", "6.6", "TCX links", TCX},
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
