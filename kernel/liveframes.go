package kernel

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// BPFFTestXDPLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES: BPF_PROG_RUN of an
// XDP program sends the frames it returns XDP_TX or XDP_REDIRECT for.
const BPFFTestXDPLiveFrames = 1 << 1

// XDPLiveFrames: BPF_PROG_RUN in live-frame mode (5.18), which the kernel-side
// memcached load generator of `cistern bench kv` (xdp-trafficgen's technique)
// sends with. Probed by running an XDP_DROP program twice in that mode.
var XDPLiveFrames = sync.OnceValue(func() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 1), // XDP_DROP
			asm.Return(),
		},
	})
	if err != nil {
		return missing("XDP live frames", "5.18", err)
	}
	defer prog.Close()
	_, err = prog.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: 2, Flags: BPFFTestXDPLiveFrames})
	if errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("BPF_PROG_RUN with XDP live frames: %w (needs Linux 5.18 or newer)", ErrMissing)
	}
	if err != nil {
		return fmt.Errorf("BPF_PROG_RUN with XDP live frames: %w", err)
	}
	return nil
})
