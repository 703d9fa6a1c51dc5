package main

import (
	"path/filepath"
	"testing"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/evict/replay"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestOldestBiggestByHand: a 100-byte cache holding a(10) b(50) c(10) d(20).
// e(30) needs 20 more bytes: the largest of the 4 oldest (a b c d) is b,
// which goes; f(35) then needs 5 more: of a c d e the largest is e.
func TestOldestBiggestByHand(t *testing.T) {
	testenv.RequireRoot(t)
	if registered != nil {
		t.Fatal(registered)
	}
	c, err := evict.Open(evict.Config{Policy: Name, Capacity: 8, Bytes: 100})
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

// oldestBiggest is the policy in Go: the hits it finds on reqs with a
// budget of bytes (evict one at a time until the new entry fits; never
// admit one larger than the budget).
func oldestBiggest(reqs []evict.Request, budget uint64) (hits uint64) {
	type ent struct {
		key  uint64
		size uint64
	}
	var q []ent // oldest first
	in := map[uint64]bool{}
	var used uint64
	for _, r := range reqs {
		if in[r.Key] {
			hits++
			continue
		}
		if uint64(r.Size) > budget {
			continue
		}
		for used+uint64(r.Size) > budget {
			best := 0
			for i := 1; i < min(4, len(q)); i++ {
				if q[i].size > q[best].size {
					best = i
				}
			}
			used -= q[best].size
			delete(in, q[best].key)
			q = append(q[:best], q[best+1:]...)
		}
		q = append(q, ent{r.Key, uint64(r.Size)})
		in[r.Key] = true
		used += uint64(r.Size)
	}
	return hits
}

// TestRunsInReplay: registered by its one row, the policy runs through the
// same replay as the built-in ones and finds the hits of the policy written
// in Go on the first 100,000 Twitter requests; its page-cache object is
// found by name too.
func TestRunsInReplay(t *testing.T) {
	testenv.RequireRoot(t)
	if registered != nil {
		t.Fatal(registered)
	}
	path := filepath.Join(replay.TraceDir(), "twitter_cluster52_1m.csv.zst")
	testenv.NeedFile(t, path, "the bundled traces: /work/shared/data/traces beside the clone (../shared), or CISTERN_TRACES")
	reqs, err := replay.ReadFile(path, "twitter")
	if err != nil {
		t.Fatal(err)
	}
	reqs = reqs[:100000]
	for _, budget := range []uint64{65536, 1 << 20} {
		res, err := replay.Run(reqs, replay.Options{Policy: Name, Size: budget, Unit: "bytes"})
		if err != nil {
			t.Fatal(err)
		}
		if want := oldestBiggest(reqs, budget); res.Hits != want || res.Fallbacks != 0 {
			t.Errorf("budget %d: %d hits, %d fallbacks; the Go policy %d hits", budget, res.Hits, res.Fallbacks, want)
		}
	}
	p, err := evict.Lookup(Name, evict.PageCache)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := p.Spec(evict.PageCache)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Programs["pc_apply"] == nil {
		t.Error("the page-cache object has no pc_apply")
	}
}
