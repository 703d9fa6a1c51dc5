package evict

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"
)

// TestDrainAppliesEvents queues events the way an owner's programs do and
// drains them: fills a, b; hit on a; fill c evicts b (LRU) onto
// evict_victims; the owner's removal of a frees a's place, so d fits.
func TestDrainAppliesEvents(t *testing.T) {
	c := open(t, "lru", 2)
	events, victims := c.coll.Maps["evict_events"], c.coll.Maps["evict_victims"]
	push := func(key uint64, op uint32) {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, key)
		binary.LittleEndian.PutUint32(b[8:], 1)
		binary.LittleEndian.PutUint32(b[12:], op)
		if err := events.Update(nil, b, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	const access, fill, remove = 1, 2, 3
	push('a', fill)
	push('b', fill)
	push('a', access)
	push('c', fill)
	push('a', remove)
	push('d', fill)
	push('z', access) // unknown: ignored
	n, err := c.Drain()
	if err != nil || n != 7 {
		t.Fatalf("drained %d, %v", n, err)
	}
	var got []uint64
	b := make([]byte, 16)
	for victims.LookupAndDelete(nil, b) == nil {
		got = append(got, binary.LittleEndian.Uint64(b))
	}
	if len(got) != 1 || got[0] != 'b' {
		t.Errorf("victims %v, want [98] (b)", got)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["events"] != 7 || st["inserts"] != 4 || st["evictions"] != 2 || st["fallbacks"] != 0 {
		t.Errorf("counters %v", st)
	}
}
