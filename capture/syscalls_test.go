package capture

import (
	"os"
	"testing"

	"github.com/cistern-ebpf/cistern/kernel"
)

// The socket calls' path follows the kernel (syscalls.go), and on the raw
// path the programs hold preemption off wherever the kernel has the kfunc
// and its verifier takes global calls under it (sid's 7.2 does): the
// counters say which.
func TestSyscallPathFollowsKernel(t *testing.T) {
	c, err := Open(Options{Transport: TransportPlain, PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cs, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	raw, off := cs["syscall_raw_tracepoints"], cs["syscall_programs_preempt_off"]
	t.Logf("%s: raw syscall tracepoints %d, preemption held off %d (bpf_preempt_disable in the kernel: %v)",
		kernel.Release(), raw, off, hasPreemptKfunc())
	switch {
	case kernel.AtLeast(7, 0) && (raw != 1 || off != 1):
		t.Fatal("7.x: want the raw tracepoints with preemption held off")
	case !kernel.AtLeast(7, 0) && (raw != 0 || off != 0):
		t.Fatal("before 7.0: want the per-call tracepoints")
	}
}
