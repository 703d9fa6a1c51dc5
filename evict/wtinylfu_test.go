package evict

import (
	"container/list"
	"testing"
)

// refWTinyLFU is the wtinylfu policy's definition in Go
// (cistern/policy/wtinylfu.bpf.h: libCacheSim's WTinyLFU, one victim per
// miss) for unit-size objects, with the same sketch hash: each request's
// hit and victim.
type refWTinyLFU struct {
	win, prob, prot               *list.List // front = newest
	where                         map[uint64]*list.Element
	seg                           map[uint64]*list.List
	sketch                        []uint8
	winSize, mainSize             int
	probSize, protSize            int
	hits, period, agings, capSlot uint64
}

// newRefWTinyLFU: hint, when between 0 and capacity, is the owner's
// evict_size_hint: the segments are shares of it (the sketch keeps a row
// per slot).
func newRefWTinyLFU(capacity, hint int) *refWTinyLFU {
	size := capacity
	if hint > 0 && hint < capacity {
		size = hint
	}
	w := max(size/100, 1)
	m := max(size-w, 0)
	return &refWTinyLFU{win: list.New(), prob: list.New(), prot: list.New(),
		where: map[uint64]*list.Element{}, seg: map[uint64]*list.List{},
		sketch:  make([]uint8, 64*capacity),
		winSize: w, mainSize: m, probSize: m / 5, protSize: m * 4 / 5,
		period: uint64(max(32*m, 32)), capSlot: uint64(capacity)}
}

func wtlfuHash(k uint64) uint64 {
	k ^= k >> 30
	k *= 0xbf58476d1ce4e5b9
	k ^= k >> 27
	k *= 0x94d049bb133111eb
	k ^= k >> 31
	return k
}

// count is the smallest of k's 4 counters (one 64-counter row, one
// counter in each quarter), after incrementing them all when add is set.
func (r *refWTinyLFU) count(k uint64, add bool) uint32 {
	h := wtlfuHash(k)
	row := (h >> 32) * r.capSlot >> 32
	least := uint8(0xff)
	for i := uint64(0); i < 4; i++ {
		x := row*64 + i*16 + (h>>(4*i))&15
		if add && r.sketch[x] < 0xff {
			r.sketch[x]++
		}
		least = min(least, r.sketch[x])
	}
	return uint32(least)
}

func (r *refWTinyLFU) move(to *list.List, k uint64) {
	if e, ok := r.where[k]; ok {
		r.seg[k].Remove(e)
	}
	r.where[k] = to.PushFront(k)
	r.seg[k] = to
}

func (r *refWTinyLFU) drop(k uint64) {
	r.seg[k].Remove(r.where[k])
	delete(r.where, k)
	delete(r.seg, k)
}

func (r *refWTinyLFU) enterMain(k uint64) {
	if r.prob.Len()+1 <= r.probSize || r.prot.Len()+1 > r.protSize {
		r.move(r.prob, k)
	} else {
		r.move(r.prot, k)
	}
}

func (r *refWTinyLFU) mainVictim() (uint64, bool) {
	for _, l := range []*list.List{r.prob, r.prot} {
		if e := l.Back(); e != nil {
			return e.Value.(uint64), true
		}
	}
	return 0, false
}

func (r *refWTinyLFU) evict() uint64 {
	for {
		e := r.win.Back()
		if e == nil {
			mv, _ := r.mainVictim()
			r.drop(mv)
			return mv
		}
		wv := e.Value.(uint64)
		if r.prob.Len()+r.prot.Len()+1 <= r.mainSize {
			r.enterMain(wv)
			r.count(wv, true)
			continue
		}
		mv, ok := r.mainVictim()
		if ok && r.count(wv, false) > r.count(mv, false) {
			r.drop(mv)
			r.enterMain(wv)
			r.count(wv, true)
			return mv
		}
		r.count(wv, true)
		r.drop(wv)
		return wv
	}
}

func (r *refWTinyLFU) access(k uint64) (hit bool, victim uint64, evicted bool) {
	if l, ok := r.seg[k]; ok {
		switch l {
		case r.win:
			r.win.MoveToFront(r.where[k])
			return true, 0, false
		case r.prob:
			r.move(r.prot, k)
			for r.prot.Len() > r.protSize {
				r.move(r.prob, r.prot.Back().Value.(uint64))
			}
		case r.prot:
			r.prot.MoveToFront(r.where[k])
		}
		r.count(k, true)
		if r.hits++; r.hits >= r.period {
			r.hits = 0
			r.agings++
			for i := range r.sketch {
				r.sketch[i] >>= 1
			}
		}
		return true, 0, false
	}
	if len(r.where) >= int(r.capSlot) {
		victim, evicted = r.evict(), true
	}
	r.move(r.win, k)
	r.count(k, true)
	return false, victim, evicted
}

// TestWTinyLFUMatchesReference replays skewed random traces through the
// kernel and the Go definition: every outcome must agree, through several
// agings of the sketch.
func TestWTinyLFUMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		capacity, n int
		keys        uint64
		hint        int // evict_size_hint (0: none)
	}{{10, 2*BatchSize + 123, 1000, 0}, {57, 2*BatchSize + 7, 1000, 0}, {200, 3 * BatchSize, 1000, 0}, {1000, 100000, 20000, 0},
		{1000, 100000, 20000, 600}} {
		c := open(t, "wtinylfu", uint32(tc.capacity))
		if tc.hint > 0 {
			if err := c.Collection().Variables["evict_size_hint"].Set(uint64(tc.hint)); err != nil {
				t.Fatal(err)
			}
		}
		reqs := make([]Request, tc.n)
		x := uint64(88172645463325252)
		for i := range reqs {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			k := x % tc.keys
			if x&3 != 0 {
				k %= uint64(tc.capacity) // a hot set about the cache's size
			}
			reqs[i] = Request{Key: k, Size: 1}
		}
		out := make([]Outcome, len(reqs))
		if _, err := c.Replay(reqs, out); err != nil {
			t.Fatal(err)
		}
		ref := newRefWTinyLFU(tc.capacity, tc.hint)
		var hits int
		for i, r := range reqs {
			hit, victim, evicted := ref.access(r.Key)
			if hit {
				hits++
			}
			if out[i].Hit != hit || (out[i].Evicted > 0) != evicted || (evicted && out[i].Victim != victim) {
				t.Fatalf("capacity %d request %d key %d: kernel %+v, reference hit %v victim %d (evicted %v)",
					tc.capacity, i, r.Key, out[i], hit, victim, evicted)
			}
		}
		if hits == 0 || hits == len(reqs) {
			t.Errorf("capacity %d: %d hits of %d", tc.capacity, hits, len(reqs))
		}
		var agings uint64
		if err := c.Collection().Variables["wtlfu_agings"].Get(&agings); err != nil {
			t.Fatal(err)
		}
		if agings != ref.agings || agings == 0 {
			t.Errorf("capacity %d: %d agings in the kernel, %d in the reference (want the same, > 0)", tc.capacity, agings, ref.agings)
		}
		st, err := c.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st["fallbacks"] != 0 || st["invalid"] != 0 || st["short"] != 0 {
			t.Errorf("capacity %d: wtinylfu needed help: %v", tc.capacity, st)
		}
		c.Close()
	}
}
