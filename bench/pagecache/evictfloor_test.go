package pagecachebench

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

// TestEvictFloor measures the eviction floor on a real file: every page
// dropped one by one leaves the cache (measureEvictCost checks it), and a
// page costs more dropped alone than within a 64-page range, where the
// call's fixed work (LRU lock, memcg uncharge, xarray lock) is shared.
func TestEvictFloor(t *testing.T) {
	// /var/tmp, not t.TempDir(): /tmp may be a tmpfs, whose pages
	// fadvise cannot drop.
	dir, err := os.MkdirTemp("/var/tmp", "evictfloor-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := measureEvictCost(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fadvise(DONTNEED): %.0f ns a scattered page, %.0f ns a page in 64-page ranges", c.single, c.ranged)
	if c.single <= 0 || c.ranged <= 0 || c.single <= c.ranged {
		t.Errorf("single %.0f ns, ranged %.0f ns a page: want both > 0 and a single page dearer", c.single, c.ranged)
	}
	rep := benchkit.New("pagecache", false)
	floorTarget(rep, "p", "p_cost", evictCost{single: 2000, ranged: 500}, 1500)
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Ratios map[string]float64 `json:"ratios"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Ratios["p_agent_cpu_floor_pct_per_10k"]; math.Abs(got-3) > 1e-9 {
		t.Errorf("floor %v: want 1.5 pages a read x 2 µs = 3 %% of a core per 10k reads/s", got)
	}
}
