package kernel

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/cistern-ebpf/cistern/internal/netenv"
)

// probeTCX attaches a trivial SchedCLS program (return TC_ACT_UNSPEC) to
// the loopback device of a private, throwaway network namespace, so the
// host's interfaces are never touched.
func probeTCX() error {
	err := netenv.Scratch(func() error {
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
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("loopback of the probe namespace: %w", err)
		}
		l, err := link.AttachTCX(link.TCXOptions{Program: prog, Interface: lo.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		return l.Close()
	})
	return err
}
