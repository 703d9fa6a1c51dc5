package evict

import (
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/cistern-ebpf/cistern/internal/bpfcheck"
)

// TestRunArgsLayout: runArgs is struct evict_run_args, as every policy's
// object was built.
func TestRunArgsLayout(t *testing.T) {
	for _, row := range Registry() {
		if row.Replay == "" {
			continue
		}
		p := row.Name
		spec, err := row.Spec(Replay)
		if err != nil {
			t.Fatal(err)
		}
		typ, err := spec.Types.AnyTypeByName("evict_run_args")
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := bpfcheck.Layout(typ, runArgs{}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestRequestLayout: Replay writes struct evict_req by hand: its size and
// the flags byte where every policy's object has them.
func TestRequestLayout(t *testing.T) {
	for _, row := range Registry() {
		if row.Replay == "" {
			continue
		}
		spec, err := row.Spec(Replay)
		if err != nil {
			t.Fatal(err)
		}
		var st *btf.Struct
		if err := spec.Types.TypeByName("evict_req", &st); err != nil {
			t.Fatalf("%s: %v", row.Name, err)
		}
		if st.Size != ReqSize {
			t.Errorf("%s: struct evict_req is %d bytes, Replay writes %d", row.Name, st.Size, ReqSize)
		}
		var flags *btf.Member
		for i := range st.Members {
			if st.Members[i].Name == "flags" {
				flags = &st.Members[i]
			}
		}
		if flags == nil || flags.Offset.Bytes() != 14 {
			t.Errorf("%s: evict_req.flags is not at byte 14, where Replay writes it: %+v", row.Name, flags)
		}
	}
}
