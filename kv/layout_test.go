package kv

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/cistern-ebpf/cistern/internal/bpfcheck"
	"github.com/cistern-ebpf/cistern/pool"
)

// TestEntryLayout: what Stats reads of a struct kv_entry (entryRefOffset,
// entryMaxBlocks) is where both objects put it. They are built with
// -no-global-types, so the struct comes from the kv_entries map's value,
// whose BTF the object keeps.
func TestEntryLayout(t *testing.T) {
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){"kern": loadKern, "kern64": loadKern64} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		m := spec.Maps["kv_entries"]
		if m == nil || m.Value == nil {
			t.Fatalf("%s: no kv_entries map with a BTF value", name)
		}
		if size, err := btf.Sizeof(m.Value); err != nil || uint32(size) != m.ValueSize {
			t.Errorf("%s: struct kv_entry is %d bytes, the map's values %d (%v)", name, size, m.ValueSize, err)
		}
		ref, _, err := bpfcheck.Member(m.Value, "body.ref")
		if err != nil {
			t.Fatal(err)
		}
		if ref != entryRefOffset {
			t.Errorf("%s: body.ref at %d in C, entryRefOffset %d", name, ref, entryRefOffset)
		}
		idx, typ, err := bpfcheck.Member(m.Value, "body.ref.idx")
		if err != nil {
			t.Fatal(err)
		}
		if idx-ref != pool.RefHeaderSize {
			t.Errorf("%s: pool_ref.idx at %d in C, pool.RefHeaderSize %d", name, idx-ref, pool.RefHeaderSize)
		}
		arr, ok := btf.UnderlyingType(typ).(*btf.Array)
		if !ok {
			t.Fatalf("%s: body.ref.idx is %v, not an array", name, typ)
		}
		if got := entryMaxBlocks(m.ValueSize); got != int(arr.Nelems) {
			t.Errorf("%s: entryMaxBlocks(%d) = %d, C has %d blocks", name, m.ValueSize, got, arr.Nelems)
		}
	}
}
