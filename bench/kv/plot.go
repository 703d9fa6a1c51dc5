package kvbench

import (
	"fmt"
	"math"
	"slices"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/plot"
)

// plotKV draws Mops/s per mode (median bars, min–max error bars): the
// kernel generator's rows, then the user-space client's per GET phase.
func plotKV(rep *benchkit.Report, path string, modes []string, skews []float64, gen bool) error {
	type group struct{ label, prefix, suffix string }
	var groups []group
	if gen {
		groups = append(groups, group{"kernel generator, GET zipf 0.99", "", ""})
	}
	for _, sk := range skews {
		ph := phaseName("get", sk)
		suffix := ""
		if ph != headline {
			suffix = " " + ph
		}
		if _, ok := rep.Get(userRow+modes[0]+suffix, "mops_per_sec"); ok {
			groups = append(groups, group{"user-space client, " + phaseLabel(ph), userRow, suffix})
		}
	}
	all := slices.Clone(modes)
	if gen {
		all = append(all, reflector)
	}
	var series []plot.BarSeries
	for _, m := range all {
		s := plot.BarSeries{Name: m}
		for _, g := range groups {
			med, lo, hi, _ := rep.Spread(g.prefix+m+g.suffix, "mops_per_sec")
			if math.IsNaN(med) {
				med, lo, hi = 0, 0, 0
			}
			s.Values, s.Lo, s.Hi = append(s.Values, med), append(s.Lo, lo), append(s.Hi, hi)
		}
		series = append(series, s)
	}
	var labels []string
	for _, g := range groups {
		labels = append(labels, g.label)
	}
	return plot.BarChart(path, "Kerby-KV: memcached UDP GETs ("+rep.Kernel()+")", "million replies per second (median, min–max)", labels, series)
}

func phaseLabel(ph string) string {
	var skew float64
	if _, err := fmt.Sscanf(ph, "get_%g", &skew); err == nil {
		return fmt.Sprintf("GET, zipf %g", skew)
	}
	if _, err := fmt.Sscanf(ph, "mix95_%g", &skew); err == nil {
		return fmt.Sprintf("95/5 GET/SET, zipf %g", skew)
	}
	return ph
}
