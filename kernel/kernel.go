// Package kernel is the one place that asks the running kernel what it
// offers and chooses, from the answers, which variant of a program or
// attachment each system uses. Systems call it instead of probing on their
// own; `cistern doctor` reports the same answers.
//
// Each probe runs at most once per process and returns nil when the feature
// works, or an error saying what is missing. Variants (see Variants) turn the
// answers into one sentence a user can read: what Cistern does instead.
package kernel

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// ErrMissing wraps every "the kernel lacks this" answer.
var ErrMissing = errors.New("not supported by this kernel")

func missing(what, since string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%s: %w (needs Linux %s or newer)", what, ErrMissing, since)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Release is the running kernel's release (uname -r).
var Release = sync.OnceValue(func() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
})

// BPFLoop: the bpf_loop helper (5.17), which every policy and batch program
// iterates with.
var BPFLoop = sync.OnceValue(func() error {
	return missing("bpf_loop helper", "5.17", features.HaveProgramHelper(ebpf.XDP, asm.FnLoop))
})

// Timer: bpf_timer (5.15), the accumulating channel's flush sweeper.
var Timer = sync.OnceValue(func() error {
	return missing("bpf_timer", "5.15", features.HaveProgramHelper(ebpf.XDP, asm.FnTimerInit))
})

// RingBuf: BPF ring buffers (5.8).
var RingBuf = sync.OnceValue(func() error {
	return missing("ring buffer maps", "5.8", features.HaveMapType(ebpf.RingBuf))
})

// SyscallProgram: BPF_PROG_TYPE_SYSCALL (5.14). Cistern runs its
// user-invoked programs as XDP through BPF_PROG_TEST_RUN instead (see
// bpf/include/cistern/call.bpf.h); only the doctor reports this one.
var SyscallProgram = sync.OnceValue(func() error {
	return missing("SYSCALL programs", "5.14", features.HaveProgramType(ebpf.Syscall))
})

// XDPLoadBytes: bpf_xdp_load_bytes (5.18).
var XDPLoadBytes = sync.OnceValue(func() error {
	return missing("bpf_xdp_load_bytes", "5.18", features.HaveProgramHelper(ebpf.XDP, asm.FnXdpLoadBytes))
})

// kernelBTF is the running kernel's BTF, loaded once.
var kernelBTF = sync.OnceValues(btf.LoadKernelSpec)

// btfTracepoint: the kernel has the tracepoint name (a tp_btf or raw_tp
// target), as its BTF says (btf_trace_<name>).
func btfTracepoint(name, since string) error {
	spec, err := kernelBTF()
	if err != nil {
		return fmt.Errorf("tracepoint %s: kernel BTF: %w", name, err)
	}
	var typ *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+name, &typ); err != nil {
		return fmt.Errorf("tracepoint %s: %w (needs Linux %s or newer)", name, ErrMissing, since)
	}
	return nil
}

// FilemapGetPages: the mm_filemap_get_pages tracepoint (6.10), the page
// cache agent's read signal; without it the agent watches read(2) and
// pread64(2) instead.
var FilemapGetPages = sync.OnceValue(func() error {
	return btfTracepoint("mm_filemap_get_pages", "6.10")
})

// Cachestat: the cachestat(2) system call (6.5), which the page-cache
// agent checks its evictions with; without it the agent uses mincore(2)
// on a mapping of the file (residency only: dirty and writeback pages are
// not told apart).
var Cachestat = sync.OnceValue(func() error {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("cachestat: %w", err)
	}
	defer f.Close()
	var cs unix.Cachestat_t
	err = unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0)
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("cachestat(2): %w (needs Linux 6.5 or newer)", ErrMissing)
	}
	if err != nil {
		return fmt.Errorf("cachestat(2): %w", err)
	}
	return nil
})
