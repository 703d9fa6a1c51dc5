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
