package bench

import (
	"fmt"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

// plotKV draws ops/sec per mode for each phase.
func plotKV(rep *benchkit.Report, path string, modes, names []string) error {
	var series []benchkit.BarSeries
	for _, m := range modes {
		s := benchkit.BarSeries{Name: m}
		for _, ph := range names {
			row := m + " " + ph
			if ph == headline {
				row = m
			}
			v, _ := rep.Get(row, "ops_per_sec")
			f, _ := v.(float64)
			s.Values = append(s.Values, f)
		}
		series = append(series, s)
	}
	var groups []string
	for _, ph := range names {
		groups = append(groups, phaseLabel(ph))
	}
	return benchkit.BarChart(path, "Kerby-KV: memcached UDP throughput ("+rep.Kernel()+")", "operations per second", groups, series)
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
