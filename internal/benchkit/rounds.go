package benchkit

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// Rounds is how many interleaved rounds a bench runs: 5 in a full run and 3
// in --quick, the fewest that give a median and a spread worth printing.
func Rounds(quick bool) int {
	if quick {
		return 3
	}
	return 5
}

// Interleave runs every mode once per round, in order, for n rounds:
// A B C A B C …, never all of A and then all of B, so that drift of the
// machine (other tenants, thermal state, page cache) hits every mode alike.
// progress, when not nil, is told each step as "round 2/5: kerby".
func Interleave(ctx context.Context, n int, modes []string, progress func(string),
	run func(ctx context.Context, round int, mode string) error) error {
	for r := range n {
		for _, m := range modes {
			if err := ctx.Err(); err != nil {
				return err
			}
			if progress != nil {
				progress(fmt.Sprintf("round %d/%d: %s", r+1, n, m))
			}
			if err := run(ctx, r, m); err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, m, err)
			}
		}
	}
	return nil
}

// Sample records one round's value of a mode's metric. The metric itself
// becomes the median of the samples so far, with metric_min and metric_max
// beside it; every sample is kept for the JSON's "rounds".
func (r *Report) Sample(mode, metric string, v float64) {
	r.mu.Lock()
	key := mode + "\x00" + metric
	if r.samples == nil {
		r.samples = map[string][]float64{}
	}
	if _, ok := r.samples[key]; !ok {
		r.sampleKeys = append(r.sampleKeys, [2]string{mode, metric})
	}
	r.samples[key] = append(r.samples[key], v)
	xs := r.samples[key]
	r.mu.Unlock()
	med, lo, hi := spread(xs)
	r.Set(mode, metric, med)
	r.Set(mode, metric+"_min", lo)
	r.Set(mode, metric+"_max", hi)
}

// Samples returns the per-round values of a mode's metric, in round order.
func (r *Report) Samples(mode, metric string) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.samples[mode+"\x00"+metric])
}

// SampleRatio records one round's value of a ratio: the ratio becomes the
// median over rounds, with name_min and name_max beside it.
func (r *Report) SampleRatio(name string, v float64) {
	r.mu.Lock()
	if r.ratioSamples == nil {
		r.ratioSamples = map[string][]float64{}
	}
	if _, ok := r.ratioSamples[name]; !ok {
		r.ratioKeys = append(r.ratioKeys, name)
	}
	r.ratioSamples[name] = append(r.ratioSamples[name], v)
	xs := r.ratioSamples[name]
	r.mu.Unlock()
	med, lo, hi := spread(xs)
	r.Ratio(name, med)
	r.Ratio(name+"_min", lo)
	r.Ratio(name+"_max", hi)
}

// PairedRatio records, round by round, a's metric over b's (rounds paired
// by index, so a noisy round weighs on both sides alike) as ratio name and
// returns its median. Rounds where b is 0 or either side is missing are
// skipped; with none left the median is NaN.
func (r *Report) PairedRatio(name, modeA, metricA, modeB, metricB string) float64 {
	return r.paired(name, modeA, metricA, modeB, metricB, func(a, b float64) (float64, bool) { return a / b, b != 0 })
}

// PairedDiff records, round by round, a's metric minus b's (rounds paired
// by index) as ratio name and returns its median: for figures in points,
// such as two probe effects measured against the same round's baseline.
func (r *Report) PairedDiff(name, modeA, metricA, modeB, metricB string) float64 {
	return r.paired(name, modeA, metricA, modeB, metricB, func(a, b float64) (float64, bool) { return a - b, true })
}

// paired samples f(a, b) round by round as ratio name, skipping rounds
// with a NaN or where f says no, and returns the median (NaN for none).
func (r *Report) paired(name, modeA, metricA, modeB, metricB string, f func(a, b float64) (float64, bool)) float64 {
	a, b := r.Samples(modeA, metricA), r.Samples(modeB, metricB)
	any := false
	for i := range min(len(a), len(b)) {
		if math.IsNaN(a[i]) || math.IsNaN(b[i]) {
			continue
		}
		if v, ok := f(a[i], b[i]); ok {
			r.SampleRatio(name, v)
			any = true
		}
	}
	if !any {
		r.Ratio(name, math.NaN())
		return math.NaN()
	}
	v, _ := r.ratioValue(name)
	return v
}

// Spread returns a mode metric's median, min and max; ok is false when the
// metric was never sampled (a value set with Set has no spread: lo = hi =
// the value).
func (r *Report) Spread(mode, metric string) (med, lo, hi float64, ok bool) {
	r.mu.Lock()
	xs := r.samples[mode+"\x00"+metric]
	r.mu.Unlock()
	if len(xs) > 0 {
		med, lo, hi = spread(xs)
		return med, lo, hi, true
	}
	v, found := r.Get(mode, metric)
	f, isF := v.(float64)
	if !found || !isF {
		return math.NaN(), math.NaN(), math.NaN(), false
	}
	return f, f, f, false
}

// RatioSpread returns a ratio's median, min and max over rounds.
func (r *Report) RatioSpread(name string) (med, lo, hi float64, ok bool) {
	r.mu.Lock()
	xs := r.ratioSamples[name]
	r.mu.Unlock()
	if len(xs) == 0 {
		v, found := r.ratioValue(name)
		return v, v, v, found
	}
	med, lo, hi = spread(xs)
	return med, lo, hi, true
}

func (r *Report) ratioValue(name string) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.ratios.get(name)
	f, isF := v.(float64)
	if !ok || !isF {
		return math.NaN(), false
	}
	return f, true
}

// TargetRatio judges a sampled ratio's median against want; the table shows
// its spread beside it.
func (r *Report) TargetRatio(name, op string, want float64) bool {
	med, lo, hi, _ := r.RatioSpread(name)
	return r.TargetSpread(name, med, lo, hi, op, want)
}

// TargetMetric judges a mode metric's median against want.
func (r *Report) TargetMetric(name, mode, metric, op string, want float64) bool {
	med, lo, hi, _ := r.Spread(mode, metric)
	return r.TargetSpread(name, med, lo, hi, op, want)
}

// TargetSpread is Target on a median, recording the rounds' min and max
// beside it.
func (r *Report) TargetSpread(name string, med, lo, hi float64, op string, want float64) bool {
	pass := r.Target(name, med, op, want)
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &r.targets[len(r.targets)-1]
	t.Min, t.Max = &lo, &hi
	return pass
}

// Headline names the few metrics the printed table shows, one column each
// as "median [min–max]"; every other metric stays in the JSON only. Without
// it the table shows every metric except the _min and _max columns.
func (r *Report) Headline(metrics ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headline = metrics
}

// Section adds a printed table of its own, titled, with the given rows
// (modes) and columns (metrics), for benches whose parts measure different
// things; rows and columns nothing was recorded for are left out. Once a
// report has sections, the table prints only them (the JSON has all).
func (r *Report) Section(title string, rows, cols []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sections = append(r.sections, section{title, rows, cols})
}

// spread is the median, min and max of xs (NaN for none).
func spread(xs []float64) (med, lo, hi float64) {
	med = Median(xs)
	lo, hi = math.NaN(), math.NaN()
	for _, x := range xs {
		if math.IsNaN(x) {
			continue
		}
		if math.IsNaN(lo) || x < lo {
			lo = x
		}
		if math.IsNaN(hi) || x > hi {
			hi = x
		}
	}
	return med, lo, hi
}

// FormatSpread renders "median [min–max]", or the median alone when the
// rounds agree exactly.
func FormatSpread(med, lo, hi float64) string {
	if lo == hi || math.IsNaN(lo) {
		return FormatFloat(med)
	}
	return FormatFloat(med) + " [" + FormatFloat(lo) + "–" + FormatFloat(hi) + "]"
}
