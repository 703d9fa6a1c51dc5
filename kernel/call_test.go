package kernel_test

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// addOne is what CISTERN_CALL(add_one, struct { __u64 x; __u32 y, ret; }, a)
// { a->x++; a->ret = a->y * 2; } compiles to, by hand.
func addOne(t *testing.T) *ebpf.Program {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 16),
			asm.Mov.Imm(asm.R0, 0), // XDP_ABORTED
			asm.JGT.Reg(asm.R4, asm.R3, "out"),
			asm.LoadMem(asm.R5, asm.R2, 0, asm.DWord),
			asm.Add.Imm(asm.R5, 1),
			asm.StoreMem(asm.R2, 0, asm.R5, asm.DWord),
			asm.LoadMem(asm.R5, asm.R2, 8, asm.Word),
			asm.LSh.Imm32(asm.R5, 1),
			asm.StoreMem(asm.R2, 12, asm.R5, asm.Word),
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return().WithSymbol("out"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestCall(t *testing.T) {
	p := addOne(t)
	a := struct {
		X      uint64
		Y, Ret uint32
	}{X: 41, Y: 21}
	if err := kernel.Call(p, &a); err != nil {
		t.Fatal(err)
	}
	if a.X != 42 || a.Y != 21 || a.Ret != 42 {
		t.Fatalf("after the call: %+v, want {X:42 Y:21 Ret:42}", a)
	}

	// 8 bytes, padded to 14 for the kernel: still short of the program's 16.
	short := struct{ X uint64 }{1}
	if err := kernel.Call(p, &short); !errors.Is(err, kernel.ErrCallArgs) {
		t.Fatalf("short struct: %v, want kernel.ErrCallArgs", err)
	}
	if short.X != 1 {
		t.Fatalf("short struct changed to %d", short.X)
	}

	if err := kernel.Call(p, a); err == nil {
		t.Fatal("a struct passed by value: no error")
	}
	var big [kernel.CallMaxArgs + 1]byte
	if err := kernel.Call(p, &big); err == nil {
		t.Fatalf("%d bytes: no error", len(big))
	}
}
