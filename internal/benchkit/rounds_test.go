package benchkit

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestInterleave(t *testing.T) {
	var order []string
	err := Interleave(context.Background(), 3, []string{"a", "b"}, nil, func(_ context.Context, r int, m string) error {
		order = append(order, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "ababab" {
		t.Errorf("order %q, want ababab", got)
	}
	if Rounds(false) < 5 || Rounds(true) < 3 {
		t.Errorf("rounds %d full, %d quick: want at least 5 and 3", Rounds(false), Rounds(true))
	}
}

func TestSamplesMedianSpreadTable(t *testing.T) {
	r := New("x", true)
	for _, v := range []float64{10, 30, 20} {
		r.Sample("fast", "ops_per_sec", v)
		r.Sample("fast", "hidden_us", 1)
	}
	for _, v := range []float64{5, 10, 4} {
		r.Sample("slow", "ops_per_sec", v)
	}
	r.Headline("ops_per_sec")
	if med := r.PairedRatio("fast_vs_slow", "fast", "ops_per_sec", "slow", "ops_per_sec"); med != 3 {
		t.Errorf("paired ratio median %v, want 3 (of 2, 3, 5)", med)
	}
	if !r.TargetRatio("fast_vs_slow", ">=", 3) {
		t.Error("target on the median should pass")
	}
	// Differences per round: 5, 20, 16, median 16 (not 20 - 5 of the medians).
	if med := r.PairedDiff("fast_minus_slow", "fast", "ops_per_sec", "slow", "ops_per_sec"); med != 16 {
		t.Errorf("paired difference median %v, want 16 (of 5, 20, 16)", med)
	}
	if v, _ := r.Get("fast", "ops_per_sec"); v != 20.0 {
		t.Errorf("median %v, want 20", v)
	}
	if v, _ := r.Get("fast", "ops_per_sec_max"); v != 30.0 {
		t.Errorf("max %v, want 30", v)
	}
	var b strings.Builder
	r.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"20 [10–30]", "3 [2–5]"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, no := range []string{"hidden_us", "ops_per_sec_min", "fast_vs_slow_max"} {
		if strings.Contains(out, no) {
			t.Errorf("table shows %q:\n%s", no, out)
		}
	}
	data, _ := json.Marshal(r)
	var doc struct {
		Rounds  map[string]map[string][]float64 `json:"rounds"`
		Targets []struct{ Min, Max float64 }
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Rounds["fast"]["ops_per_sec"]; len(got) != 3 || got[1] != 30 {
		t.Errorf("rounds of fast ops_per_sec = %v", got)
	}
	if got := doc.Rounds["ratios"]["fast_vs_slow"]; len(got) != 3 {
		t.Errorf("rounds of the ratio = %v", got)
	}
	if doc.Targets[0].Min != 2 || doc.Targets[0].Max != 5 {
		t.Errorf("target spread %+v", doc.Targets[0])
	}
}

func TestSections(t *testing.T) {
	r := New("x", false)
	r.Sample("a", "x_ns", 1)
	r.Sample("a", "x_ns", 3)
	r.Set("b", "y", 2.0)
	r.Set("c", "hidden", 5.0)
	r.Section("part one (ns)", []string{"a", "missing"}, []string{"x_ns", "nobody"})
	r.Section("part two", []string{"b"}, []string{"y"})
	var b strings.Builder
	r.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"part one (ns)", "2 [1–3]", "part two"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, no := range []string{"hidden", "nobody", "missing"} {
		if strings.Contains(out, no) {
			t.Errorf("table shows %q:\n%s", no, out)
		}
	}
}
