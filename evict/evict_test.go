package evict

import (
	"errors"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func open(t *testing.T, policy string, capacity uint32) *Cache {
	t.Helper()
	testenv.RequireRoot(t)
	c, err := Open(Config{Policy: policy, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// trace turns "CEB" into requests with keys 'C', 'E', 'B' of size 10.
func trace(s string) []Request {
	reqs := make([]Request, len(s))
	for i, k := range s {
		reqs[i] = Request{Key: uint64(k), Size: 10}
	}
	return reqs
}

// outcomes renders replay outcomes as "M", "H" or "M<victim>".
func outcomes(out []Outcome) string {
	parts := make([]string, len(out))
	for i, o := range out {
		switch {
		case o.Hit:
			parts[i] = "H"
		case o.Evicted > 0:
			parts[i] = "M" + string(rune(o.Victim))
		default:
			parts[i] = "M"
		}
	}
	return strings.Join(parts, " ")
}

// TestPoliciesByHand replays C E B E D A B A D B through a cache of 3
// objects. Lists are written head (newest) first; [x1] is a set bit.
func TestPoliciesByHand(t *testing.T) {
	const tr = "CEBEDABADB"
	for _, tc := range []struct{ policy, want string }{
		// FIFO: [B E C], E hit, D evicts the tail C: [D B E]; A evicts E:
		// [A D B]; B, A, D, B hit.
		{"fifo", "M M M H MC ME H H H H"},
		// LRU: [B E C], E hit: [E B C]; D evicts C: [D E B]; A evicts B:
		// [A D E]; B evicts E: [B A D]; A, D, B hit.
		{"lru", "M M M H MC MB ME H H H"},
		// MRU evicts the head: [B E C], E hit: [E B C]; D evicts E:
		// [D B C]; A evicts D: [A B C]; B hit: [B A C]; A hit: [A B C];
		// D evicts A: [D B C]; B hit.
		{"mru", "M M M H ME MD H H MA H"},
		// CLOCK: [B E C], E hit sets E1; D: tail C clear, evicted:
		// [D B E1]; A: E1 cleared and moved to the head [E D B], B evicted:
		// [A E D]; B: D evicted: [B A E]; A hit: A1; D: tail E evicted:
		// [D B A1]; B hit.
		{"clock", "M M M H MC MB MD H ME H"},
		// SIEVE: [B E C], E hit: E1; D: hand at the tail C, evicted, hand
		// to E: [D B E1]; A: E1 cleared (stays), hand to B, evicted, hand
		// to D: [A D E]; B: D evicted, hand to A: [B A E]; A hit: A1;
		// D: A1 cleared, hand to B, evicted, hand past the head:
		// [D A E]; B: hand wraps to the tail E, evicted: [B D A].
		{"sieve", "M M M H MC MB MD H MB ME"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			c := open(t, tc.policy, 3)
			reqs := trace(tr)
			out := make([]Outcome, len(reqs))
			hits, err := c.Replay(reqs, out)
			if err != nil {
				t.Fatal(err)
			}
			if got := outcomes(out); got != tc.want {
				t.Errorf("%s on %s:\n got %s\nwant %s", tc.policy, tr, got, tc.want)
			}
			if want := uint64(strings.Count(tc.want, "H")); hits != want {
				t.Errorf("hits = %d, want %d", hits, want)
			}
			st, err := c.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st["fallbacks"] != 0 || st["invalid"] != 0 || st["short"] != 0 {
				t.Errorf("a correct policy needed help: %v", st)
			}
			if st["requests"] != uint64(len(tr)) || st["hits"] != hits || st["evictions"] != st["evict_calls"] {
				t.Errorf("counters disagree: %v", st)
			}
			if st["hit_bytes"] != 10*hits || st["bytes"] != 10*uint64(len(tr)) {
				t.Errorf("byte counters: %v", st)
			}
		})
	}
}

// TestBrokenPolicyIsContained runs a policy that proposes nothing on even
// calls and 32 slots that do not exist (claiming 1000) on odd ones: the
// registry refuses every proposal, the fallback makes the room, and the cache
// still holds exactly its capacity and answers correctly.
func TestBrokenPolicyIsContained(t *testing.T) {
	const capacity = 8
	c := open(t, "broken", capacity)
	var reqs []Request
	for i := range 100 {
		reqs = append(reqs, Request{Key: uint64(i), Size: 1})
	}
	out := make([]Outcome, len(reqs))
	if _, err := c.Replay(reqs, out); err != nil {
		t.Fatal(err)
	}
	evicted := map[uint64]bool{}
	for i, o := range out {
		if o.Hit {
			t.Fatalf("request %d: hit on a key never seen", i)
		}
		if (i < capacity) != (o.Evicted == 0) || (i >= capacity && o.Evicted != 1) {
			t.Fatalf("request %d evicted %d entries", i, o.Evicted)
		}
		if o.Evicted > 0 {
			if o.Victim >= uint64(i) || evicted[o.Victim] {
				t.Fatalf("request %d evicted key %d: not resident", i, o.Victim)
			}
			evicted[o.Victim] = true
		}
	}
	// The fallback's hand goes round the slots in order, so the resident
	// keys are the last 8, and hit now.
	hits, err := c.Replay(reqs[100-capacity:], nil)
	if err != nil {
		t.Fatal(err)
	}
	if hits != capacity {
		t.Errorf("%d of the last %d keys hit, want all", hits, capacity)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	calls := uint64(100 - capacity)
	want := map[string]uint64{
		"evict_calls":        calls,
		"evictions":          calls,
		"fallbacks":          calls,
		"fallback_evictions": calls,
		"short":              calls / 2,      // the even calls proposed 0 < 1
		"proposed":           calls / 2 * 32, // odd calls: 1000 clamped to 32
		"invalid":            calls / 2 * 32, // every one refused
		"no_room":            0,
		"requests":           100 + capacity,
		"hits":               capacity,
	}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("%s = %d, want %d (%v)", k, st[k], v, st)
		}
	}
}

// TestReplayAcrossBatches checks that state carries across program runs:
// a trace longer than a batch over a small key space gives the same result
// as a reference LRU in Go.
func TestReplayAcrossBatches(t *testing.T) {
	const capacity = 100
	c := open(t, "lru", capacity)
	reqs := make([]Request, 3*BatchSize+17)
	x := uint64(88172645463325252)
	for i := range reqs {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		reqs[i] = Request{Key: x % 300, Size: 1}
	}
	out := make([]Outcome, len(reqs))
	if _, err := c.Replay(reqs, out); err != nil {
		t.Fatal(err)
	}
	// Reference LRU: a slice, most recent first.
	var q []uint64
	for i, r := range reqs {
		hit := false
		for j, k := range q {
			if k == r.Key {
				hit = true
				q = append(q[:j], q[j+1:]...)
				break
			}
		}
		var victim uint64
		if !hit && len(q) == capacity {
			victim = q[len(q)-1]
			q = q[:len(q)-1]
		}
		q = append([]uint64{r.Key}, q...)
		if out[i].Hit != hit || (!hit && out[i].Evicted > 0 && out[i].Victim != victim) {
			t.Fatalf("request %d key %d: kernel %+v, reference hit %v victim %d", i, r.Key, out[i], hit, victim)
		}
	}
}

func TestEveryPolicyLoads(t *testing.T) {
	for _, row := range Registry() {
		if row.Replay == "" {
			continue
		}
		p := row.Name
		for _, capacity := range []uint32{0, 1, 1 << 20} {
			c := open(t, p, capacity)
			if _, err := c.Replay(trace("ABCA"), nil); err != nil {
				t.Errorf("%s, capacity %d: %v", p, capacity, err)
			}
			c.Close()
		}
	}
	if _, err := Open(Config{Policy: "nope"}); !errors.As(err, new(*UnknownPolicyError)) {
		t.Errorf("unknown policy: %v", err)
	}
}

// TestUnseenHitsAreNotTold: a hit with Unseen set is a hit, but the policy
// is not told of it. LRU over a cache of 2: A B A C evicts B when the hit
// on A is told (A moved to the head), and A when it is not.
func TestUnseenHitsAreNotTold(t *testing.T) {
	for _, unseen := range []bool{false, true} {
		c := open(t, "lru", 2)
		reqs := trace("ABAC")
		reqs[2].Unseen = unseen
		out := make([]Outcome, len(reqs))
		if _, err := c.Replay(reqs, out); err != nil {
			t.Fatal(err)
		}
		want := "M M H MB"
		if unseen {
			want = "M M H MA"
		}
		if got := outcomes(out); got != want {
			t.Errorf("unseen %v: %s, want %s", unseen, got, want)
		}
	}
}
