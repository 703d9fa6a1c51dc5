package cbuf

import (
	"math"
	"testing"
	"time"
)

// blockedShare models a pipeline stage that needs `need` pages in flight:
// with fewer it waits the missing share of its time.
func blockedShare(quota, need uint64) float64 {
	if quota >= need {
		return 0
	}
	return 1 - float64(quota)/float64(need)
}

func TestQosPolicyHoldsTarget(t *testing.T) {
	for _, need := range []uint64{300, 800} {
		c := &component{quota: 256, qosPPM: 100000} // 10 %
		other := &component{quota: 256}
		var shares []float64
		for tick := 0; tick < 80; tick++ {
			c.pol.lastFrac = blockedShare(c.quota, need)
			other.pol.lastFrac = 0.5 // always hungry
			want := qos(nil, []*component{c, other}, 1600)
			c.quota, other.quota = max(want[c], minPoolPages), max(want[other], minPoolPages)
			if c.quota+other.quota > 1600+minPoolPages {
				t.Fatalf("quotas %d+%d exceed the memory", c.quota, other.quota)
			}
			if tick >= 40 {
				shares = append(shares, c.pol.lastFrac)
			}
			if tick == 40 {
				need += need / 2 // the load changes: the search must follow
			}
		}
		m := 0.0
		for _, s := range shares {
			m += s
		}
		m /= float64(len(shares))
		if math.Abs(m-0.10)/0.10 > 0.25 {
			t.Errorf("need %d: mean blocked share %.3f, want 0.10 +-25%%", need, m)
		}
	}
}

func TestPriorityPolicyServesHigherFirst(t *testing.T) {
	hi := &component{quota: 500, priority: 10, pol: policyState{lastFrac: 0.5}}
	lo := &component{quota: 500, priority: 1, pol: policyState{lastFrac: 0.5}}
	want := priority(nil, []*component{lo, hi}, 1200)
	if want[hi] <= want[lo] || want[hi] < demand(hi) || want[hi]+want[lo] > 1200 {
		t.Fatalf("priority gave hi %d (demand %d), lo %d of 1200", want[hi], demand(hi), want[lo])
	}
}

func TestMaxThroughputGrowsTheBlockedAndFits(t *testing.T) {
	a := &component{quota: 400, pol: policyState{lastFrac: 0.4}}
	b := &component{quota: 400, used: 100}
	want := maxThroughput(nil, []*component{a, b}, 1000)
	if want[a] <= want[b] || want[a]+want[b] > 1000 {
		t.Fatalf("a (blocked 40%%) got %d, idle b got %d of 1000", want[a], want[b])
	}
}

// Shrinking a pool pops free buffers off the client's free lists; the
// client keeps allocating within the smaller pool.
func TestShrinkTakesBackFreeBuffers(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{Memory: 4 << 20, Pool: 256 * PageSize})
	a, err := ConnectWith(sock, ClientOptions{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var ids []ID
	for i := 0; i < 200; i++ {
		_, id, err := a.Alloc(PageSize)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		a.Free(id)
	}
	m.mu.Lock()
	c := m.comps[a.slot]
	before := c.used
	c.quota = 64
	m.shrink(c)
	after := c.used
	m.mu.Unlock()
	if after > 64 || before <= 64 {
		t.Fatalf("pool pages %d -> %d, want <= 64", before, after)
	}
	seen := map[ID]bool{}
	for i := 0; i < 64; i++ {
		b, id, err := a.Alloc(PageSize)
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatal("one buffer handed out twice")
		}
		seen[id] = true
		b[0] = 1 // its pages are live: a taken-back buffer would read back 0 later
		if b[0] != 1 {
			t.Fatal("write lost")
		}
	}
	m.mu.Lock()
	used := c.used
	m.mu.Unlock()
	if used > 64 {
		t.Fatalf("after shrinking to 64 pages the pool holds %d", used)
	}
}

// Over quota with every buffer held elsewhere, the manager flags them
// relinquish; the holder's last free reports it and the pool shrinks at
// once, without waiting for a policy period.
func TestRelinquishShrinksEagerly(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{Memory: 4 << 20, Pool: 128 * PageSize, Interval: time.Hour})
	a, _ := ConnectWith(sock, ClientOptions{Name: "owner"})
	defer a.Close()
	b, _ := ConnectWith(sock, ClientOptions{Name: "holder"})
	defer b.Close()
	var ids []ID
	for i := 0; i < 100; i++ {
		_, id, err := a.Alloc(PageSize)
		if err != nil {
			t.Fatal(err)
		}
		a.Send(id)
		if _, err := b.Buf(id, PageSize); err != nil {
			t.Fatal(err)
		}
		a.Free(id)
		ids = append(ids, id)
	}
	m.mu.Lock()
	c := m.comps[a.slot]
	c.quota = 64
	m.shrink(c) // nothing is dead yet: flags relinquish
	before := c.used
	m.mu.Unlock()
	for _, id := range ids {
		b.Free(id)
	}
	waitFor(t, "the pool to shrink to its quota", 5*time.Second, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return c.used <= 64
	})
	if before <= 64 {
		t.Fatalf("the pool held only %d pages before the frees", before)
	}
}
