package kernel

import (
	"errors"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// BPFFTestXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES: BPF_PROG_RUN of an
// XDP program sends the frames it returns XDP_TX or XDP_REDIRECT for.
const BPFFTestXDPLiveFrames = 1 << 1

// probeXDPLiveFrames runs an XDP_DROP program twice in live-frame mode.
func probeXDPLiveFrames() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 1), // XDP_DROP
			asm.Return(),
		},
	})
	if err != nil {
		return err
	}
	defer prog.Close()
	_, err = prog.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: 2, Flags: BPFFTestXDPLiveFrames})
	if errors.Is(err, unix.EINVAL) {
		return errTooOld
	}
	return err
}
