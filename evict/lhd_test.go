package evict

import "testing"

// TestLHDLearnsHotSet: 80 hot keys interleaved with keys never seen again,
// in a cache of 100. Every hot key's reuse distance is 160 distinct keys,
// so LRU keeps none of them; LHD learns from its counts that entries which
// were hit before are worth more than new ones, once evict_periodic has
// rebuilt the density table, and keeps the hot set.
func TestLHDLearnsHotSet(t *testing.T) {
	var reqs []Request
	for i := range 400000 {
		if i%2 == 0 {
			reqs = append(reqs, Request{Key: uint64(i/2%80) + 1, Size: 1})
		} else {
			reqs = append(reqs, Request{Key: 1<<32 + uint64(i), Size: 1})
		}
	}
	// Judged on the second half, after two rebuilds.
	half := len(reqs) / 2
	ratio := map[string]float64{}
	for _, p := range []string{"lru", "lhd"} {
		c := open(t, p, 100)
		out := make([]Outcome, len(reqs))
		if _, err := c.Replay(reqs, out); err != nil {
			t.Fatal(err)
		}
		var hits int
		for i, o := range out[half:] {
			if o.Hit && reqs[half+i].Key < 1<<32 {
				hits++
			} else if o.Hit {
				t.Fatalf("%s: hit on a key never seen before", p)
			}
		}
		st, err := c.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st["fallbacks"] != 0 || st["invalid"] != 0 {
			t.Errorf("%s needed help: %v", p, st)
		}
		ratio[p] = float64(hits) / float64(half/2)
		if p == "lhd" {
			var n uint64
			if err := c.Collection().Variables["lhd_reconfigurations"].Get(&n); err != nil {
				t.Fatal(err)
			}
			// 400,000 accesses, rebuilt every 65,536, checked every 4,096.
			if n != 6 {
				t.Errorf("lhd_reconfigurations = %d, want 6", n)
			}
		}
	}
	t.Logf("hits per hot request, second half: %v", ratio)
	if ratio["lru"] > 0.01 || ratio["lhd"] < 0.8 {
		t.Errorf("hits per hot request (second half) %v: want lru ~0, lhd >= 0.8", ratio)
	}
}
