package capture

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/cistern-ebpf/cistern/kernel"
)

// The socket calls (plain.bpf.h): write, read, sendto, recvfrom, sendmsg,
// recvmsg, writev, readv and close.
var socketCalls = []string{"write", "read", "sendto", "recvfrom", "sendmsg", "recvmsg", "writev", "readv"}

// rawSyscallPath: the socket calls are traced through the raw sys_enter
// and sys_exit tracepoints, three programs at every system call of every
// process (about 120 ns more per call, docs/capture.md), because from 7.0
// the kernel runs the syscall tracepoints' programs with preemption on and
// skips a program's run while a preempted task is inside it: the raw
// tracepoints' guards are per program, the entry is redone at an exit and
// a second exit program stands in for the first (plain.bpf.h, SKIPPED
// RUNS). Before 7.0 no run was skipped in any test (6.1, 6.12 and 6.18, on
// either path), and the per-call tracepoints run programs at the socket
// calls only. A release, not a probe: whether a program can be preempted
// is the kernel's code and preemption mode, which no probe reads cheaply
// (docs/capture.md).
func rawSyscallPath() bool { return kernel.AtLeast(7, 0) }

// attachSyscalls attaches the socket-call programs of the kernel's path,
// the exits first: an entry recorded before its exit programs are attached
// would only linger until the thread's next call.
func (c *Capture) attachSyscalls(objs *capObjects) error {
	c.rawPath = rawSyscallPath()
	if c.rawPath {
		for _, p := range []*ebpf.Program{objs.CapSysExit, objs.CapSysExitLast /* after the first */, objs.CapSysEnter} {
			l, err := link.AttachTracing(link.TracingOptions{Program: p})
			if err != nil {
				return fmt.Errorf("attach raw syscall tracepoint: %w", err)
			}
			c.links = append(c.links, l)
			c.tpProgs = append(c.tpProgs, p)
		}
		return nil
	}
	tp := func(name string, p *ebpf.Program) error {
		l, err := link.Tracepoint("syscalls", name, p, nil)
		if err != nil {
			return fmt.Errorf("attach tracepoint syscalls/%s: %w", name, err)
		}
		c.links = append(c.links, l)
		return nil
	}
	for _, call := range socketCalls {
		if err := tp("sys_exit_"+call, objs.CapTpExit); err != nil {
			return err
		}
	}
	for _, call := range socketCalls {
		if err := tp("sys_enter_"+call, objs.CapTpEnter); err != nil {
			return err
		}
	}
	if err := tp("sys_enter_close", objs.CapTpClose); err != nil {
		return err
	}
	c.tpProgs = append(c.tpProgs, objs.CapTpExit, objs.CapTpEnter, objs.CapTpClose)
	return nil
}
