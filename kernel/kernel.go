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
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
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
