package kernel

import (
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// probeTCX asks for a TCX link of a trivial SchedCLS program (return
// TC_ACT_UNSPEC) on an interface index no interface has, so that no
// interface is touched: a kernel with TCX refuses the index (ENODEV), one
// without refuses the attach type. cilium/ebpf's own check does the same.
func probeTCX() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SchedCLS,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, -1), // TC_ACT_UNSPEC: continue
			asm.Return(),
		},
	})
	if err != nil {
		return fmt.Errorf("load a SchedCLS program: %w", err)
	}
	defer prog.Close()
	l, err := link.AttachTCX(link.TCXOptions{Program: prog, Interface: math.MaxUint32, Attach: ebpf.AttachTCXIngress})
	switch {
	case errors.Is(err, unix.ENODEV):
		return nil
	case err == nil: // an interface with that index: TCX works
		return l.Close()
	}
	return err
}
