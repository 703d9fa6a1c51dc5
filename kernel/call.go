package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
)

// CallMaxArgs is the largest argument struct Call passes: the linear data
// BPF_PROG_TEST_RUN gives an XDP program (a page less XDP's headroom and
// struct skb_shared_info). CISTERN_CALL_MAX_ARGS in
// bpf/include/cistern/call.bpf.h is the same number.
const CallMaxArgs = 3520

// callMinData is ETH_HLEN: the kernel refuses shorter XDP test input.
const callMinData = 14

const (
	xdpAborted = 0
	xdpPass    = 2
)

// ErrCallArgs: the program found its packet shorter than its argument
// struct (it returned XDP_ABORTED), i.e. the Go struct is smaller than the
// C one.
var ErrCallArgs = errors.New("argument buffer shorter than the program's argument struct")

// Call runs prog, a program defined with CISTERN_CALL
// (bpf/include/cistern/call.bpf.h), once with args as its argument struct:
// args (a pointer to a fixed-size struct laid out like the C one, as bpf2go
// generates them) is encoded in host byte order into the packet, padded to
// the kernel's 14-byte minimum, and the packet the program leaves is decoded
// back into args. This is how every user-invoked Cistern program runs, on
// every supported kernel (6.1 refuses the SYSCALL programs that would
// otherwise do this with the maps and locks Cistern's programs use).
func Call(prog *ebpf.Program, args any) error {
	if v := reflect.ValueOf(args); v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("call %v: args must be a non-nil pointer to a struct, not %T", prog, args)
	}
	size := binary.Size(args)
	if size < 0 {
		return fmt.Errorf("call %v: %T has no fixed size", prog, args)
	}
	if size > CallMaxArgs {
		return fmt.Errorf("call %v: %T is %d bytes, at most %d fit", prog, args, size, CallMaxArgs)
	}
	n := max(size, callMinData)
	buf := make([]byte, 2*n)
	in, out := buf[:n:n], buf[n:]
	if _, err := binary.Encode(in, binary.NativeEndian, args); err != nil {
		return fmt.Errorf("call %v: encode %T: %w", prog, args, err)
	}
	ret, err := prog.Run(&ebpf.RunOptions{Data: in, DataOut: out})
	if err != nil {
		return fmt.Errorf("call %v: %w", prog, err)
	}
	switch ret {
	case xdpPass:
	case xdpAborted:
		return fmt.Errorf("call %v with %T (%d bytes): %w", prog, args, size, ErrCallArgs)
	default:
		return fmt.Errorf("call %v: returned %d: not a CISTERN_CALL program", prog, ret)
	}
	if _, err := binary.Decode(out, binary.NativeEndian, args); err != nil {
		return fmt.Errorf("call %v: decode %T: %w", prog, args, err)
	}
	return nil
}

// CallRet runs a CISTERN_CALL program whose argument struct is struct
// cistern_call_ret (nothing in, one number out) and returns that number.
func CallRet(prog *ebpf.Program) (int64, error) {
	var a struct{ Ret int64 }
	err := Call(prog, &a)
	return a.Ret, err
}
