package evict

import (
	"container/list"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestS3FIFOByHand replays a trace through S3-FIFO with 10 objects: small
// FIFO 1, main FIFO 9, ghost 9. Lists are written head (newest) first.
func TestS3FIFOByHand(t *testing.T) {
	const tr = "ABCDEFGHIJ" + "AKAKCLLLMNEML"
	// A..J miss: A goes to small; small is full before any eviction, so B..J
	// go to main [J..B]. A hit (freq 1). K: main is not over 9, small's tail
	// A has freq 1 < 2: evicted, ghost [A]; K to small. A: small's K evicted,
	// ghost [K A]; A is a ghost hit: to main [A J..B], ghost [K]. K: main 10
	// > 9: its tail B (freq 0) evicted; K a ghost hit: main [K A J..C].
	// C hit (freq 1). L: main's tail C goes round (freq 0), D evicted; L to
	// small. L, L hit (freq 2). M: small's L moves to main, small empty,
	// main 10 > 9: E evicted; M to small. N: M evicted, ghost [M]. E (not a
	// ghost): N evicted, ghost [N M]. M: E evicted, ghost [E N M], M a ghost
	// hit: to main. L hit.
	const want = "M M M M M M M M M M H MA MK MB H MD H H ME MM MN ME H"
	c := open(t, "s3fifo", 10)
	reqs := trace(tr)
	out := make([]Outcome, len(reqs))
	if _, err := c.Replay(reqs, out); err != nil {
		t.Fatal(err)
	}
	if got := outcomes(out); got != want {
		t.Errorf("s3fifo on %s:\n got %s\nwant %s", tr, got, want)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["fallbacks"] != 0 || st["invalid"] != 0 || st["short"] != 0 {
		t.Errorf("s3fifo needed help: %v", st)
	}
}

// refS3FIFO is libCacheSim 0.3.5's S3FIFO (defaults) for unit-size objects,
// written from its source; it returns each request's hit and victim.
type refS3FIFO struct {
	small, main, ghost             *list.List // front = newest
	where                          map[uint64]*list.Element
	gwhere                         map[uint64]*list.Element
	freq                           map[uint64]int
	smallSize, mainSize, ghostSize int
	hasEvicted                     bool
}

func newRefS3FIFO(capacity int) *refS3FIFO {
	s := max(capacity/10, 1)
	return &refS3FIFO{small: list.New(), main: list.New(), ghost: list.New(),
		where: map[uint64]*list.Element{}, gwhere: map[uint64]*list.Element{}, freq: map[uint64]int{},
		smallSize: s, mainSize: capacity - s, ghostSize: capacity * 9 / 10}
}

func (r *refS3FIFO) access(k uint64) (hit bool, victim uint64, evicted bool) {
	if _, ok := r.where[k]; ok {
		r.freq[k] = min(r.freq[k]+1, 3)
		return true, 0, false
	}
	ghostHit := false
	if e, ok := r.gwhere[k]; ok {
		r.ghost.Remove(e)
		delete(r.gwhere, k)
		ghostHit = true
	}
	if r.small.Len()+r.main.Len() >= r.smallSize+r.mainSize {
		r.hasEvicted = true
		for !evicted {
			if r.main.Len() > r.mainSize || r.small.Len() == 0 {
				for !evicted {
					e := r.main.Back()
					v := e.Value.(uint64)
					if f := r.freq[v]; f >= 1 {
						r.freq[v] = min(f, 3) - 1
						r.main.MoveToFront(e)
						continue
					}
					r.main.Remove(e)
					delete(r.where, v)
					victim, evicted = v, true
				}
				break
			}
			for !evicted && r.small.Len() > 0 {
				e := r.small.Back()
				v := e.Value.(uint64)
				r.small.Remove(e)
				if r.freq[v] >= 2 {
					r.freq[v] = 0
					r.where[v] = r.main.PushFront(v)
					continue
				}
				delete(r.where, v)
				victim, evicted = v, true
				if r.ghostSize > 0 {
					if r.ghost.Len() >= r.ghostSize {
						old := r.ghost.Back()
						delete(r.gwhere, old.Value.(uint64))
						r.ghost.Remove(old)
					}
					r.gwhere[v] = r.ghost.PushFront(v)
				}
			}
		}
	}
	r.freq[k] = 0
	if ghostHit || (!r.hasEvicted && r.small.Len() >= r.smallSize) {
		r.where[k] = r.main.PushFront(k)
	} else {
		r.where[k] = r.small.PushFront(k)
	}
	return false, victim, evicted
}

// TestS3FIFOMatchesReference replays a skewed random trace longer than a
// batch through the kernel and the Go reference: every outcome must agree.
func TestS3FIFOMatchesReference(t *testing.T) {
	for _, capacity := range []int{10, 57, 200} {
		c := open(t, "s3fifo", uint32(capacity))
		reqs := make([]Request, 2*BatchSize+123)
		x := uint64(88172645463325252)
		for i := range reqs {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			k := x % 1000
			if x&3 != 0 {
				k %= 100 // a hot set
			}
			reqs[i] = Request{Key: k, Size: 1}
		}
		out := make([]Outcome, len(reqs))
		if _, err := c.Replay(reqs, out); err != nil {
			t.Fatal(err)
		}
		ref := newRefS3FIFO(capacity)
		var hits int
		for i, r := range reqs {
			hit, victim, evicted := ref.access(r.Key)
			if hit {
				hits++
			}
			if out[i].Hit != hit || (out[i].Evicted > 0) != evicted || (evicted && out[i].Victim != victim) {
				t.Fatalf("capacity %d request %d key %d: kernel %+v, reference hit %v victim %d (evicted %v)",
					capacity, i, r.Key, out[i], hit, victim, evicted)
			}
		}
		if hits == 0 || hits == len(reqs) {
			t.Errorf("capacity %d: %d hits of %d", capacity, hits, len(reqs))
		}
		c.Close()
	}
}

// TestS3FIFOBytesScale: with every size 7 and a budget of 7 x capacity
// bytes, S3-FIFO's queues, counted in bytes, must behave exactly as with
// capacity objects (the reference above): the byte accounting of small,
// main and ghost is consistent.
func TestS3FIFOBytesScale(t *testing.T) {
	testenv.RequireRoot(t)
	const capacity = 60 // a multiple of 10: the 10% and 90% splits scale exactly
	// More slots than fit: only the byte budget may limit the cache.
	c, err := Open(Config{Policy: "s3fifo", Capacity: 4 * capacity, Bytes: 7 * capacity})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reqs := make([]Request, BatchSize+321)
	x := uint64(88172645463325252)
	for i := range reqs {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		k := x % 1000
		if x&3 != 0 {
			k %= 100
		}
		reqs[i] = Request{Key: k, Size: 7}
	}
	out := make([]Outcome, len(reqs))
	if _, err := c.Replay(reqs, out); err != nil {
		t.Fatal(err)
	}
	ref := newRefS3FIFO(capacity)
	for i, r := range reqs {
		hit, victim, evicted := ref.access(r.Key)
		if out[i].Hit != hit || (out[i].Evicted > 0) != evicted || (evicted && out[i].Victim != victim) {
			t.Fatalf("request %d key %d: kernel %+v, reference hit %v victim %d (evicted %v)", i, r.Key, out[i], hit, victim, evicted)
		}
	}
}
