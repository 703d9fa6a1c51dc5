package kvbench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// TestKVBenchRuns drives a miniature bench end to end and checks what it
// reports (not how fast: performance lives in `cistern bench kv`).
func TestKVBenchRuns(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Exclusive(t, testenv.Traffic) // a loopback/veth flood: not beside another package's flood or --all capture
	dir := t.TempDir()
	plot := filepath.Join(dir, "kv.png")
	rep, err := Run(context.Background(), Options{
		Keys: 2000, Phase: 300 * time.Millisecond, GenPhase: 200 * time.Millisecond, Rounds: 2, Skews: []float64{0.99},
		Modes: []string{"vanilla", "fixed128", "kerby"}, PlotPath: plot,
		TCPDepth: 1, // one GET per segment: each hit (0.9 of the GETs) answerable in the kernel
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Bench  string                          `json:"bench"`
		Modes  map[string]map[string]any       `json:"modes"`
		Ratios map[string]float64              `json:"ratios"`
		Rounds map[string]map[string][]float64 `json:"rounds"`
		Notes  []string                        `json:"notes"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	rows := []string{"user-space vanilla", "user-space fixed128", "user-space kerby", "tcp vanilla", "tcp kerby"}
	gen := kernel.XDPLiveFrames() == nil
	if gen {
		rows = append(rows, "vanilla", "fixed128", "kerby", "reflector")
	}
	for _, m := range rows {
		row := doc.Modes[m]
		for _, k := range []string{"mops_per_sec", "mops_per_sec_min", "mops_per_sec_max", "p50_us", "p99_us", "wrong_values"} {
			if _, ok := row[k]; !ok {
				t.Errorf("modes.%s has no %s", m, k)
			}
		}
		if row["wrong_values"].(float64) != 0 || row["mops_per_sec"].(float64) <= 0 {
			t.Errorf("%s: %v", m, row)
		}
		if got := len(doc.Rounds[m]["mops_per_sec"]); got != 2 {
			t.Errorf("%s: %d rounds of mops_per_sec, want 2", m, got)
		}
	}
	for _, m := range []string{"user-space kerby", "kerby"} {
		if !gen && m == "kerby" {
			continue
		}
		if doc.Modes[m]["kernel_hit_ratio"].(float64) < 0.9 || doc.Modes[m]["memory_efficiency"].(float64) < 0.9 {
			t.Errorf("%s: %v", m, doc.Modes[m])
		}
	}
	// TCP rows: every reply in order (the misses' END too), and Kerby-KV
	// answers the warm GETs of preloaded keys (0.9 of them)
	for _, m := range []string{"tcp vanilla", "tcp kerby"} {
		if v, ok := doc.Modes[m]["out_of_order"].(float64); !ok || v != 0 {
			t.Errorf("%s: out_of_order %v", m, doc.Modes[m]["out_of_order"])
		}
		// memcached's read counter (it mounts tracefs if it must)
		if _, ok := doc.Modes[m]["memcached_reads"].(float64); !ok {
			t.Errorf("%s: no memcached_reads (notes: %v)", m, doc.Notes)
		}
	}
	if r, _ := doc.Modes["tcp kerby"]["kernel_hit_ratio"].(float64); r < 0.8 {
		t.Errorf("tcp kerby: kernel_hit_ratio %v", doc.Modes["tcp kerby"]["kernel_hit_ratio"])
	}
	if gen && doc.Modes["kerby"]["value_hit_ratio"].(float64) < 0.99 {
		t.Errorf("kernel generator against kerby: value hit ratio %v", doc.Modes["kerby"]["value_hit_ratio"])
	}
	if _, ok := doc.Ratios["kerby_vs_vanilla"]; !ok {
		t.Error("no kerby_vs_vanilla ratio")
	}
	if st, err := os.Stat(plot); err != nil || st.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
}

// TestKVTraceRuns replays a prefix of the Twitter trace through Kerby-KV
// with two policies: every value checked, the policy (not, but for a
// drainer stall, the fallback) evicting, and the kernel hit ratio near the
// offline replay's.
func TestKVTraceRuns(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Exclusive(t, testenv.Traffic) // a loopback/veth flood: not beside another package's flood or --all capture
	rep, err := Trace(context.Background(), TraceOptions{
		Requests: 30000, PoolMB: 1, Policies: []string{"fifo", "lru"}, Workers: 2,
	})
	if err != nil {
		if os.IsNotExist(err) {
			testenv.Missing(t, "the bundled trace ("+err.Error()+")", "/work/shared/data/traces beside the clone (../shared), or CISTERN_TRACES")
		}
		t.Fatal(err)
	}
	for _, p := range []string{"fifo", "lru"} {
		get := func(m string) float64 {
			v, ok := rep.Get(p, m)
			if !ok {
				t.Fatalf("%s: no %s", p, m)
			}
			return v.(float64)
		}
		k, off := get("kernel_hit_ratio"), get("offline_hit_ratio")
		// The policy evicts ahead of need; only a drainer delayed past the
		// reserve (a busy shared machine) lets the FIFO fallback act.
		if get("wrong_values") != 0 || get("policy_fallbacks") > get("evictions")/10 || get("events_lost") != 0 || get("evictions") == 0 {
			t.Errorf("%s: wrong %v fallbacks %v lost events %v evictions %v", p,
				get("wrong_values"), get("policy_fallbacks"), get("events_lost"), get("evictions"))
		}
		if k < 0.3 || k > off+0.05 || k < off-0.1 {
			t.Errorf("%s: kernel hit ratio %.3f, offline %.3f", p, k, off)
		}
	}
}
