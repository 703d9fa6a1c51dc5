package capture

import (
	"os"
	"testing"

	"github.com/cistern-ebpf/cistern/kernel"
)

// The socket-call programs load with or without preemption held off, and
// the counter says which: off where the kernel has the kfunc and its
// verifier takes global calls under it (measured: 6.18 and sid's 7.2), on
// where it refuses them (6.12, which loads the programs again without) or
// lacks the kfunc (6.1).
func TestPreemptOffFollowsKernel(t *testing.T) {
	c, err := Open(Options{Transport: TransportPlain, PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cs, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	got := cs["syscall_programs_preempt_off"]
	t.Logf("bpf_preempt_disable in the kernel: %v; programs hold preemption off: %d", hasPreemptKfunc(), got)
	switch {
	case !hasPreemptKfunc() && got != 0:
		t.Fatalf("preemption held off on a kernel without bpf_preempt_disable")
	case kernel.AtLeast(6, 18) && got != 1:
		t.Fatalf("%s: the programs do not hold preemption off (6.18 and 7.2 accept it)", kernel.Release())
	case !kernel.AtLeast(6, 13) && got != 0:
		t.Fatalf("%s: preemption held off where the verifier refuses global calls under it", kernel.Release())
	}
}
