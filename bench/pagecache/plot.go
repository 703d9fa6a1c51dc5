package pagecachebench

import (
	"math"
	"slices"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

// barGroup is one group of bars: a part's metric, each mode's median over
// its default's (inverse: default over mode, for times and latencies, so
// that higher is better).
type barGroup struct {
	label, part, metric string
	inverse             bool
}

// barKind is one series: a mode, across the groups.
type barKind struct{ name, mode string }

// relativeBars draws every kind's median against its part's default, one
// group per barGroup that has a default; kinds with no bar are left out.
func relativeBars(rep *benchkit.Report, path, title string, groups []barGroup, kinds []barKind) error {
	get := func(mode, metric string) (float64, bool) {
		v, ok := rep.Get(mode, metric)
		f, isF := v.(float64)
		return f, ok && isF && f > 0 && !math.IsNaN(f)
	}
	var labels []string
	series := make([]benchkit.BarSeries, len(kinds))
	for i, k := range kinds {
		series[i].Name = k.name
	}
	for _, g := range groups {
		base, ok := get(g.part+"/default", g.metric)
		if !ok {
			continue
		}
		labels = append(labels, g.label)
		for i, k := range kinds {
			v, ok := get(g.part+"/"+k.mode, g.metric)
			switch {
			case !ok:
				v = 0
			case g.inverse:
				v = base / v
			default:
				v /= base
			}
			series[i].Values = append(series[i].Values, v)
		}
	}
	if len(labels) == 0 {
		return nil
	}
	var used []benchkit.BarSeries
	for _, s := range series {
		if slices.ContainsFunc(s.Values, func(v float64) bool { return v > 0 }) {
			used = append(used, s)
		}
	}
	return benchkit.BarChart(path, title, "median / default's median (higher is better)", labels, used)
}
