package benchkit

import (
	"math"
	"slices"
	"testing"
)

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // descending: Percentile must sort
	}
	orig := slices.Clone(hundred)
	for _, tc := range []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{hundred, 0, 1},
		{hundred, 100, 100},
		{hundred, 50, 50.5},
		{hundred, 99, 99.01}, // numpy.percentile(range(1, 101), 99)
		{[]float64{5}, 99, 5},
		{[]float64{1, 2, 3, 4}, 25, 1.75},
		{[]float64{3, math.NaN(), 1, 2}, 50, 2},
		{[]float64{math.Inf(-1), 1, math.Inf(1)}, 50, 1},
	} {
		if got := Percentile(tc.xs, tc.p); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.xs, tc.p, got, tc.want)
		}
	}
	if !slices.Equal(hundred, orig) {
		t.Error("Percentile modified its input")
	}
	for _, tc := range []struct {
		xs []float64
		p  float64
	}{{nil, 50}, {[]float64{math.NaN()}, 50}, {hundred, -1}, {hundred, 101}, {hundred, math.NaN()}} {
		if got := Percentile(tc.xs, tc.p); !math.IsNaN(got) {
			t.Errorf("Percentile(%v, %v) = %v, want NaN", tc.xs, tc.p, got)
		}
	}
}

func TestMedian(t *testing.T) {
	if got := Median([]float64{9, 1, 5}); got != 5 {
		t.Errorf("odd median = %v, want 5", got)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even median = %v, want 2.5", got)
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("empty median = %v, want NaN", got)
	}
}
