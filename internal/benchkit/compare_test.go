package benchkit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeRun(t *testing.T, name string, r *Report) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Two runs through their JSON: a target whose verdict flips is reported,
// one that holds is not, and runs of different benches are refused.
func TestCompareVerdicts(t *testing.T) {
	mk := func(bench string, speed, lat float64) *Report {
		r := New(bench, true)
		for _, d := range []float64{-0.1, 0, 0.1} {
			r.SampleRatio("speedup", speed+d)
		}
		r.TargetRatio("speedup", ">=", 1.5)
		r.Target("p99_us", lat, "<=", 100)
		return r
	}
	var runs []RunTargets
	for i, r := range []*Report{mk("x", 1.7, 50), mk("x", 1.4, 60)} {
		rt, err := ReadTargets(writeRun(t, "run"+string(rune('a'+i))+".json", r))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, rt)
	}
	var b strings.Builder
	differ, err := Compare(&b, runs)
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if len(differ) != 1 || differ[0] != "speedup" {
		t.Errorf("differ %v, want [speedup]:\n%s", differ, out)
	}
	for _, want := range []string{"1.700 [1.600–1.800] PASS", "1.400 [1.300–1.500] FAIL", "NO", "yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	other, err := ReadTargets(writeRun(t, "y.json", mk("y", 2, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compare(&b, []RunTargets{runs[0], other}); err == nil {
		t.Error("runs of two benches compared without an error")
	}
	if _, err := ReadTargets(writeRun(t, "bad.json", nil)); err == nil {
		t.Error("a JSON without a bench read as a run")
	}
}
