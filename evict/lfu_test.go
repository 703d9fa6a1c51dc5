package evict

import "testing"

// TestLFUByHand replays C E B E D A B A D B through a cache of 3 objects,
// fewer than the 8 samples, so every eviction scores all residents. Lists
// are head (newest) first, counts in brackets; the hand starts at the tail.
func TestLFUByHand(t *testing.T) {
	const tr = "CEBEDABADB"
	// [B0 E0 C0], E hit: E1. D: walk C E B, the lowest first walked is C;
	// the hand (wrapped to C) moves on to E as C goes: [D B E1]. A: walk
	// E B D: B; the hand wraps to E: [A D E1]. B: walk E D A: D:
	// [B A E1]. A hit: A1. D: walk E A B: B: [D A1 E1]. B: walk E A D: D.
	// Exact LFU with LRU ties (libCacheSim's LFU) evicts the same.
	const want = "M M M H MC MB MD H MB MD"
	c := open(t, "lfu", 3)
	reqs := trace(tr)
	out := make([]Outcome, len(reqs))
	if _, err := c.Replay(reqs, out); err != nil {
		t.Fatal(err)
	}
	if got := outcomes(out); got != want {
		t.Errorf("lfu on %s:\n got %s\nwant %s", tr, got, want)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["fallbacks"] != 0 || st["invalid"] != 0 || st["short"] != 0 {
		t.Errorf("lfu needed help: %v", st)
	}
}
