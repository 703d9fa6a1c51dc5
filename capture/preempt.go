package capture

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// From 7.x the syscall tracepoints run their programs with preemption on,
// and a task preempted inside one makes the kernel skip that program for
// every other task on its CPU until it runs again (plain.bpf.h, SKIPPED
// RUNS). The raw-tracepoint programs (syscalls.go) then hold preemption off
// themselves (cap_preempt_off) where the kernel lets them: it has
// bpf_preempt_disable and its verifier allows global functions under it
// (7.2 and 6.18 do; 6.10-6.12 have the kfunc but refuse the calls, and the
// programs are loaded again without). The per-call path, before 7.0, needs
// none of it.

// hasPreemptKfunc: the kernel's BTF has bpf_preempt_disable.
func hasPreemptKfunc() bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	var fn *btf.Func
	return spec.TypeByName("bpf_preempt_disable", &fn) == nil
}

// load loads the capture's programs, with preemption held off in the
// socket-call programs if the kernel accepts it, else without
// (c.preemptOff says which).
func (c *Capture) load(spec *ebpf.CollectionSpec, objs *capObjects) error {
	c.preemptOff = rawSyscallPath() && hasPreemptKfunc()
	if err := spec.Variables["cap_preempt_off"].Set(u8of(c.preemptOff)); err != nil {
		return fmt.Errorf("set cap_preempt_off: %w", err)
	}
	err := spec.LoadAndAssign(objs, nil)
	var ve *ebpf.VerifierError
	if err != nil && c.preemptOff && errors.As(err, &ve) {
		c.preemptOff = false
		if serr := spec.Variables["cap_preempt_off"].Set(uint8(0)); serr != nil {
			return fmt.Errorf("set cap_preempt_off: %w", serr)
		}
		err = spec.LoadAndAssign(objs, nil)
	}
	if err != nil {
		return fmt.Errorf("load capture programs: %w", err)
	}
	return nil
}
