package bpfcheck

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// TestUprobesKeepTaskStack: every uprobe program in the tree carries the
// CISTERN_TASK_STACK tail call, so no kernel runs it on a per-CPU private
// stack that a preempted run shares with the next (issue #38: the
// capture's records corrupt on 7.2's PREEMPT_LAZY).
func TestUprobesKeepTaskStack(t *testing.T) {
	wd, _ := os.Getwd()
	root, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(root)
	if err != nil {
		t.Fatal(err)
	}
	uprobes := 0
	for _, o := range objs {
		spec, err := ebpf.LoadCollectionSpec(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, ps := range spec.Programs {
			if ps.Type == ebpf.Kprobe && strings.HasPrefix(ps.SectionName, "u") {
				uprobes++
			}
		}
		for _, name := range NoTaskStack(spec) {
			t.Errorf("%s: uprobe program %s lacks CISTERN_TASK_STACK(ctx)", strings.TrimPrefix(o, root+"/"), name)
		}
	}
	// capture's libssl and Go TLS probes alone are 16.
	if uprobes < 16 {
		t.Errorf("found only %d uprobe programs under %s", uprobes, root)
	}
}

// TestNoTaskStackFindsUnguarded: a uprobe program without the tail call is
// named; a guarded one, and a kprobe, are not.
func TestNoTaskStackFindsUnguarded(t *testing.T) {
	ret := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	guarded := append(asm.Instructions{asm.FnTailCall.Call()}, ret...)
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"bare":    {Type: ebpf.Kprobe, SectionName: "uretprobe", Instructions: ret},
		"guarded": {Type: ebpf.Kprobe, SectionName: "uprobe", Instructions: guarded},
		"kprobe":  {Type: ebpf.Kprobe, SectionName: "kprobe/x", Instructions: ret},
	}}
	if got := NoTaskStack(spec); !slices.Equal(got, []string{"bare"}) {
		t.Errorf("NoTaskStack = %v, want [bare]", got)
	}
}
