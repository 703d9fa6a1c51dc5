package main

import (
	"testing"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestOldestBiggestByHand: a 100-byte cache holding a(10) b(50) c(10) d(20).
// e(30) needs 20 more bytes: the largest of the 4 oldest (a b c d) is b,
// which goes; f(35) then needs 5 more: of a c d e the largest is e.
func TestOldestBiggestByHand(t *testing.T) {
	testenv.RequireRoot(t)
	c, err := Open(100, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reqs []evict.Request
	for _, r := range []struct {
		k    byte
		size uint32
	}{{'a', 10}, {'b', 50}, {'c', 10}, {'d', 20}, {'e', 30}, {'f', 35}, {'a', 10}} {
		reqs = append(reqs, evict.Request{Key: uint64(r.k), Size: r.size})
	}
	out := make([]evict.Outcome, len(reqs))
	if _, err := c.Replay(reqs, out); err != nil {
		t.Fatal(err)
	}
	if o := out[4]; o.Evicted != 1 || o.Victim != 'b' {
		t.Errorf("e evicted %d, last %q; want b", o.Evicted, rune(o.Victim))
	}
	if o := out[5]; o.Evicted != 1 || o.Victim != 'e' {
		t.Errorf("f evicted %d, last %q; want e", o.Evicted, rune(o.Victim))
	}
	if !out[6].Hit {
		t.Error("a was evicted")
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["fallbacks"] != 0 || st["invalid"] != 0 {
		t.Errorf("counters %v", st)
	}
}
