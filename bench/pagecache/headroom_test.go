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
