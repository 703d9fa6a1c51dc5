package pagecachebench

import (
	"math"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

// TestAutoJudgedAgainstBracketingDefaults: where a part runs the default
// on both sides of auto, auto's ratio is to their mean, round by round,
// and the defaults' own ratio is reported beside it.
func TestAutoJudgedAgainstBracketingDefaults(t *testing.T) {
	rep := benchkit.New("t", true)
	// The device slows through each round: 100 before auto, 80 after; auto
	// ran in between at 90, as fast as a default there would have.
	for _, r := range [][3]float64{{100, 90, 80}, {120, 108, 96}, {110, 99, 88}} {
		rep.Sample("p/default", "ops_per_sec", r[0])
		rep.Sample("p/agent_auto", "ops_per_sec", r[1])
		rep.Sample("p/default_after", "ops_per_sec", r[2])
		rep.Sample("p/agent_lfu", "ops_per_sec", r[1]/2)
	}
	autoTargets(rep, "p", "ops_per_sec", false, []string{"agent_lfu"})
	med, lo, hi, ok := rep.RatioSpread("p_auto_vs_default")
	if !ok || math.Abs(med-1) > 1e-9 || math.Abs(lo-1) > 1e-9 || math.Abs(hi-1) > 1e-9 {
		t.Fatalf("auto vs the bracketing defaults: %v [%v-%v] (%v), want 1 in every round", med, lo, hi, ok)
	}
	if rep, _, _, ok := rep.RatioSpread("p_default_repeat"); !ok || math.Abs(rep-0.8) > 1e-9 {
		t.Fatalf("default_repeat %v (%v), want 0.8", rep, ok)
	}
	var passed bool
	for _, tr := range rep.Targets() {
		if tr.Name == "p_auto_vs_default" {
			passed = tr.Pass
		}
	}
	if !passed {
		t.Fatalf("auto at the bracket's mean failed its target: %+v", rep.Targets())
	}
	// Without the default after, the ratio is to the default before (0.9).
	rep = benchkit.New("t", true)
	rep.Sample("p/default", "ops_per_sec", 100)
	rep.Sample("p/agent_auto", "ops_per_sec", 90)
	autoTargets(rep, "p", "ops_per_sec", false, nil)
	if med, _, _, _ := rep.RatioSpread("p_auto_vs_default"); math.Abs(med-0.9) > 1e-9 {
		t.Fatalf("auto vs the default alone: %v, want 0.9", med)
	}
}

// TestAutoAsideJudgedByItsCost: where auto stood aside in every round the
// target is its measured cost's bound (auto_cost_bound), and the ops/s
// ratio, at the device's mercy, is reported without a verdict; where it
// ran a policy in any round, the ops/s ratio is judged.
func TestAutoAsideJudgedByItsCost(t *testing.T) {
	targets := func(rep *benchkit.Report) map[string]bool {
		out := map[string]bool{}
		for _, tr := range rep.Targets() {
			out[tr.Name] = tr.Pass
		}
		return out
	}
	build := func(ran []float64, share []float64) *benchkit.Report {
		rep := benchkit.New("t", true)
		// The device drifts: auto's runs are 10 % slower than the defaults'.
		for i := range ran {
			rep.Sample("p/default", "ops_per_sec", 100)
			rep.Sample("p/agent_auto", "ops_per_sec", 90)
			rep.Sample("p/default_after", "ops_per_sec", 100)
			rep.Sample("p/agent_auto", "auto_ran_policy", ran[i])
			rep.Sample("p/agent_auto", "auto_cost_bound", 1-share[i]/100)
		}
		autoTargets(rep, "p", "ops_per_sec", false, nil)
		return rep
	}
	got := targets(build([]float64{0, 0, 0}, []float64{0.8, 1.1, 0.9}))
	if pass, ok := got["p_auto_cost_bound"]; !ok || !pass {
		t.Fatalf("aside at 0.8-1.1 %% of a core: targets %v, want p_auto_cost_bound passed", got)
	}
	if _, ok := got["p_auto_vs_default"]; ok {
		t.Fatalf("aside: the ops/s ratio was judged too: %v", got)
	}
	got = targets(build([]float64{0, 0, 0}, []float64{4, 5, 3.5}))
	if pass := got["p_auto_cost_bound"]; pass {
		t.Fatalf("aside at 3.5-5 %% of a core: targets %v, want p_auto_cost_bound failed", got)
	}
	got = targets(build([]float64{0, 1, 0}, []float64{0.8, 1.1, 0.9}))
	if pass, ok := got["p_auto_vs_default"]; !ok || pass {
		t.Fatalf("a policy ran in one round at 0.9x: targets %v, want p_auto_vs_default judged and failed", got)
	}
	if _, ok := got["p_auto_cost_bound"]; ok {
		t.Fatalf("a policy ran: the cost bound was judged: %v", got)
	}
}

// TestAutoPerCgroupJudgedPerWorkload: per-cgroup runs an auto in each
// cgroup in one mode; each workload's auto is judged on its own measure
// (RocksDB's ops/s, the search's seconds, lower better) by its own
// choice: the RocksDB auto stood aside in every round (its own cost
// bound is judged, not the search's auto's, which runs in a process of
// its own), the search's ran MRU (its time is).
// The best fixed configuration is each workload's own.
func TestAutoPerCgroupJudgedPerWorkload(t *testing.T) {
	rep := benchkit.New("t", true)
	for range 3 {
		for m, v := range map[string][2]float64{
			"default": {1000, 4}, "default_after": {1000, 4}, "agent_auto": {990, 2.5},
			"global_lfu": {1100, 4.2}, "global_mru": {900, 2}, "tailored": {1080, 2.1},
		} {
			rep.Sample("percgroup/"+m, "rocksdb_ops_per_sec", v[0])
			rep.Sample("percgroup/"+m, "search_seconds", v[1])
		}
		rep.Sample("percgroup/agent_auto", "rocksdb_auto_ran_policy", 0)
		rep.Sample("percgroup/agent_auto", "search_auto_ran_policy", 1)
		rep.Sample("percgroup/agent_auto", "rocksdb_auto_cost_bound", 0.99)
		rep.Sample("percgroup/agent_auto", "search_auto_cost_bound", 0.80)
	}
	fixed := []string{"global_lfu", "global_mru", "tailored"}
	autoTargetsOn(rep, "percgroup_rocksdb", "percgroup", "rocksdb_", "rocksdb_ops_per_sec", false, fixed)
	autoTargetsOn(rep, "percgroup_search", "percgroup", "search_", "search_seconds", true, fixed)
	got := map[string]bool{}
	for _, tr := range rep.Targets() {
		got[tr.Name] = tr.Pass
	}
	want := map[string]bool{
		"percgroup_rocksdb_auto_cost_bound": true, "percgroup_rocksdb_auto_vs_best_fixed": true,
		"percgroup_search_auto_vs_default": true, "percgroup_search_auto_vs_best_fixed": true,
	}
	if len(got) != len(want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Fatalf("targets %v, want %v", got, want)
		}
	}
	// RocksDB's best fixed is global_lfu (1100 ops/s): 0.9x.
	if med, _, _, _ := rep.RatioSpread("percgroup_rocksdb_auto_vs_best_fixed"); math.Abs(med-0.9) > 1e-9 {
		t.Errorf("rocksdb auto vs best fixed %v, want 0.9", med)
	}
	// The search: 4 s under the defaults, 2.5 s under auto: 1.6x; the
	// best fixed is global_mru (2 s): 0.8x.
	if med, _, _, _ := rep.RatioSpread("percgroup_search_auto_vs_default"); math.Abs(med-1.6) > 1e-9 {
		t.Errorf("search auto vs default %v, want 1.6", med)
	}
	if med, _, _, _ := rep.RatioSpread("percgroup_search_auto_vs_best_fixed"); math.Abs(med-0.8) > 1e-9 {
		t.Errorf("search auto vs best fixed %v, want 0.8", med)
	}
}
