package benchkit

import (
	"math"
	"slices"
)

// Median returns the median of samples, or NaN when there are none.
func Median(samples []float64) float64 {
	return Percentile(samples, 50)
}

// Percentile returns the p-th percentile (p from 0 to 100, so 99 for p99) of
// samples, interpolating linearly between the closest ranks as numpy and
// most spreadsheets do. NaN samples are ignored; it returns NaN when no
// sample remains or p is out of range. samples is not modified.
func Percentile(samples []float64, p float64) float64 {
	if !(p >= 0 && p <= 100) {
		return math.NaN()
	}
	xs := make([]float64, 0, len(samples))
	for _, x := range samples {
		if !math.IsNaN(x) {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	rank := p / 100 * float64(len(xs)-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, len(xs)-1)
	frac := rank - float64(lo)
	if frac == 0 {
		return xs[lo] // exact rank: no interpolation, no Inf-Inf
	}
	return xs[lo] + frac*(xs[hi]-xs[lo])
}
