package kv

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestPolicyKeepsHotKey: a pool of 32 blocks (the policy may fill 24, the
// rest is the reserve) and values of 3 blocks, so 8 fit. One hot key is
// read after every set of a new key. LRU keeps it resident throughout; FIFO
// evicts it once 8 newer keys came in. Victims are chosen by the policy
// (drained after every request, as the drainer would), never by the
// fallback, and the pool leaks nothing.
func TestPolicyKeepsHotKey(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		policy  string
		hotHits int
	}{{"lru", 30}, {"fifo", 7}} {
		t.Run(tc.policy, func(t *testing.T) {
			cfg := Config{MaxObjects: 64, WriteWindow: 1, Policy: tc.policy}
			cfg.defaults()
			srv, err := loadWithCapacity(cfg, 32)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			x, e := srv.Programs()
			h := &harness{t: t, srv: srv, xdp: x, egress: e}
			drain := func() {
				if _, _, err := srv.Drain(); err != nil {
					t.Fatal(err)
				}
			}
			hot := value(300, 0xAA)
			h.set("hot", 0, hot)
			drain()
			hits := 0
			for i := 0; i < 30; i++ {
				h.set(fmt.Sprintf("k%02d", i), 0, value(300, byte(i)))
				drain()
				if v, _, hit := h.get(1, "hot"); hit {
					if !bytes.Equal(v, hot) {
						t.Fatalf("hot key returned a wrong value")
					}
					hits++
				}
				drain()
			}
			if hits != tc.hotHits {
				t.Errorf("%s: hot key hit %d of 30 times, want %d", tc.policy, hits, tc.hotHits)
			}
			c := h.counters()
			pc, err := srv.PolicyCounters()
			if err != nil {
				t.Fatal(err)
			}
			if c["policy_fallbacks"] != 0 || c["events_lost"] != 0 || c["evictions"] < 20 || pc["fallbacks"] != 0 {
				t.Errorf("counters %v, policy %v", c, pc)
			}
			st, err := srv.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Pool.LeakedBlocks != 0 || st.Pool.LiveBlocks > 24 {
				t.Errorf("pool %+v", st.Pool)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := (Config{Policy: "nope"}).Validate(); err == nil {
		t.Error("unknown policy accepted")
	}
	if err := (Config{Policy: "lhd"}).Validate(); err != nil {
		t.Error(err)
	}
}
