package evict

import (
	"container/list"
	"testing"
)

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

// refLFU is the lfu policy's definition in Go (cistern/policy/lfu.bpf.h):
// one insertion list (front = newest), a use count per entry from 0, and a
// hand that samples up to 8 entries from where it rests towards the newest,
// wrapping, and proposes the least used of them (ties: the first walked).
// It is not libCacheSim's LFU (exact, ties by age): docs/eviction.md.
type refLFU struct {
	l     *list.List
	where map[uint64]*list.Element
	count map[uint64]uint32
	hand  *list.Element // nil: the tail
	size  int
}

func newRefLFU(size int) *refLFU {
	return &refLFU{l: list.New(), where: map[uint64]*list.Element{}, count: map[uint64]uint32{}, size: size}
}

func (r *refLFU) access(k uint64) (hit bool, victim uint64, evicted bool) {
	if _, ok := r.where[k]; ok {
		r.count[k]++
		return true, 0, false
	}
	if r.l.Len() >= r.size {
		cur := r.hand
		if cur == nil {
			cur = r.l.Back()
		}
		var best *list.Element
		for range min(r.l.Len(), 8) {
			if best == nil || r.count[cur.Value.(uint64)] < r.count[best.Value.(uint64)] {
				best = cur
			}
			if cur = cur.Prev(); cur == nil {
				cur = r.l.Back()
			}
		}
		r.hand = cur
		if r.hand == best {
			r.hand = best.Prev()
		}
		victim, evicted = best.Value.(uint64), true
		r.l.Remove(best)
		delete(r.where, victim)
		delete(r.count, victim)
	}
	r.where[k] = r.l.PushFront(k)
	r.count[k] = 0
	return false, victim, evicted
}

// TestLFUMatchesDefinition replays skewed random traces through the kernel
// and refLFU: every outcome must agree.
func TestLFUMatchesDefinition(t *testing.T) {
	for _, capacity := range []int{3, 8, 9, 50, 500} {
		c := open(t, "lfu", uint32(capacity))
		reqs := make([]Request, 2*BatchSize+77)
		x := uint64(2463534242)
		for i := range reqs {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			k := x % (4 * uint64(capacity))
			if x&3 != 0 {
				k %= uint64(capacity)/2 + 1 // a hot set
			}
			reqs[i] = Request{Key: k, Size: 1}
		}
		out := make([]Outcome, len(reqs))
		if _, err := c.Replay(reqs, out); err != nil {
			t.Fatal(err)
		}
		ref := newRefLFU(capacity)
		var hits int
		for i, r := range reqs {
			hit, victim, evicted := ref.access(r.Key)
			if hit {
				hits++
			}
			if out[i].Hit != hit || (out[i].Evicted > 0) != evicted || (evicted && out[i].Victim != victim) {
				t.Fatalf("capacity %d request %d key %d: kernel %+v, definition hit %v victim %d (evicted %v)",
					capacity, i, r.Key, out[i], hit, victim, evicted)
			}
		}
		if hits == 0 || hits == len(reqs) {
			t.Errorf("capacity %d: %d hits of %d", capacity, hits, len(reqs))
		}
		c.Close()
	}
}
