package bpfcheck

import (
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// NoTaskStack lists the uprobe and uretprobe programs of spec that hold no
// tail call, i.e. that do not use CISTERN_TASK_STACK
// (bpf/include/cistern/taskstack.bpf.h). From 6.13 such a program runs its
// larger frames on a per-CPU private stack, which a preemptible uprobe
// shares with the next task that runs the same program on that CPU.
func NoTaskStack(spec *ebpf.CollectionSpec) []string {
	var out []string
	for name, ps := range spec.Programs {
		if ps.Type != ebpf.Kprobe || !(strings.HasPrefix(ps.SectionName, "uprobe") || strings.HasPrefix(ps.SectionName, "uretprobe")) {
			continue
		}
		guarded := false
		for _, ins := range ps.Instructions {
			if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnTailCall) {
				guarded = true
				break
			}
		}
		if !guarded {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
