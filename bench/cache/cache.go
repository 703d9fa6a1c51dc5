package cachebench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/evict/replay"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/plot"
)

// BundledTrace is one of the traces in the shared trace directory.
type BundledTrace struct {
	Name, File, Format string
}

// Bundled are the traces `cistern bench cache` replays, in order.
var Bundled = []BundledTrace{
	{"twitter", "twitter_cluster52_1m.csv.zst", "twitter"},
	{"arc", "arc_oltp.lis.zst", "arc"},
	{"cloudphysics", "cloudphysics_io.csv.zst", "cloudphysics"},
}

// Workload is what a run replays: every bundled trace at 1, 5, 10 and 25%
// of its distinct objects; quick, the first two at 1 and 10%.
func Workload(quick bool) ([]BundledTrace, []float64) {
	if quick {
		return Bundled[:2], []float64{1, 10}
	}
	return Bundled, []float64{1, 5, 10, 25}
}

// Policies are the policies the bench compares, simplest first, then the
// rest of the registry's.
func Policies() []string {
	ps := []string{"fifo", "lru", "mru", "clock", "sieve", "s3fifo", "lfu"}
	for _, p := range evict.Names(evict.Replay) {
		if !contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// Trace is a parsed trace for Run.
type Trace struct {
	Name string
	Reqs []evict.Request
}

// Options configure Run.
type Options struct {
	Traces   []Trace
	Policies []string  // default Policies()
	Percents []float64 // cache sizes, % of each trace's distinct objects
	Quick    bool
	Rounds   int          // interleaved rounds (default benchkit.Rounds)
	Progress func(string) // may be nil
}

// Curve is one miss-ratio curve: a policy on a trace.
type Curve struct {
	Trace, Policy string
	Percents      []float64
	MissRatios    []float64
}

// SizeAt is pct% of distinct objects, at least 1.
func SizeAt(distinct int, pct float64) uint32 {
	return uint32(max(1, int(float64(distinct)*pct/100+0.5)))
}

// PercentLabel renders 2.5 as "2.5pct" and 10 as "10pct", for metric names.
func PercentLabel(pct float64) string {
	return strings.ReplaceAll(fmt.Sprintf("%gpct", pct), ".", "_")
}

// Run replays every trace through every policy at every size. The report
// has one mode per policy with, per trace, hit_ratio at each size
// (TRACE_hit_ratio_Npct) and the replay rate over all its sizes
// (TRACE_requests_per_sec); the curves are for plotting.
func Run(opt Options) (*benchkit.Report, []Curve, error) {
	if len(opt.Policies) == 0 {
		opt.Policies = Policies()
	}
	if len(opt.Traces) == 0 || len(opt.Percents) == 0 {
		return nil, nil, fmt.Errorf("bench cache: no traces or no sizes")
	}
	rep := benchkit.New("cache", opt.Quick)
	rep.SetConfig("policies", strings.Join(opt.Policies, ","))
	rep.SetConfig("sizes_pct_of_distinct", opt.Percents)
	rep.SetConfig("unit", "objects")
	sizes := make([][]uint32, len(opt.Traces))
	for i, t := range opt.Traces {
		d := replay.Distinct(t.Reqs)
		rep.SetConfig(t.Name+"_requests", len(t.Reqs))
		rep.SetConfig(t.Name+"_distinct", d)
		for _, pct := range opt.Percents {
			sizes[i] = append(sizes[i], SizeAt(d, pct))
		}
		rep.SetConfig(t.Name+"_sizes", sizes[i])
	}
	// Rounds interleave the policies. Hit ratios are a property of the
	// replay, so every size is replayed in the first round only; later
	// rounds replay the largest size again, for the replay rate's spread.
	rounds := opt.Rounds
	if rounds == 0 {
		rounds = benchkit.Rounds(opt.Quick)
	}
	rep.SetConfig("rounds", rounds)
	last := len(opt.Percents) - 1
	var headline []string
	for _, t := range opt.Traces {
		headline = append(headline, t.Name+"_hit_ratio_"+PercentLabel(opt.Percents[last]), t.Name+"_requests_per_sec")
	}
	rep.Headline(headline...)
	noted := map[string]bool{}
	err := benchkit.Interleave(context.Background(), rounds, opt.Policies, opt.Progress, func(_ context.Context, r int, p string) error {
		for i, t := range opt.Traces {
			for j, pct := range opt.Percents {
				if r > 0 && j != last {
					continue
				}
				res, err := replay.Run(t.Reqs, replay.Options{Policy: p, Size: uint64(sizes[i][j]), Trace: t.Name})
				if err != nil {
					return fmt.Errorf("%s on %s at %d: %w", p, t.Name, sizes[i][j], err)
				}
				rep.Sample(p, t.Name+"_hit_ratio_"+PercentLabel(pct), res.HitRatio)
				if j == last && res.RequestsPerSec > 0 {
					rep.Sample(p, t.Name+"_requests_per_sec", res.RequestsPerSec)
				}
				key := fmt.Sprintf("%s/%s/%d", p, t.Name, j)
				if res.Fallbacks > 0 && !noted[key] {
					noted[key] = true
					rep.Note(fmt.Sprintf("%s on %s at %d objects needed the fallback %d times", p, t.Name, sizes[i][j], res.Fallbacks))
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var curves []Curve
	for _, p := range opt.Policies {
		for _, t := range opt.Traces {
			c := Curve{Trace: t.Name, Policy: p, Percents: opt.Percents}
			for _, pct := range opt.Percents {
				v, _ := rep.Get(p, t.Name+"_hit_ratio_"+PercentLabel(pct))
				c.MissRatios = append(c.MissRatios, 1-v.(float64))
			}
			curves = append(curves, c)
		}
	}
	rep.Note(fmt.Sprintf("hit ratios are replayed at every size in round 1 and at %s in every round; TRACE_requests_per_sec is the replay rate at %s",
		PercentLabel(opt.Percents[last]), PercentLabel(opt.Percents[last])))
	rep.Note("hit ratios of fifo, lru, clock, sieve and s3fifo match libCacheSim 0.3.5 (unit-size objects), wtinylfu within 0.5 points (evict/replay TestMatchesLibCacheSim); lfu samples 8 candidates and is not libCacheSim's exact LFU; lhd rebuilds its table every 65,536 accesses, libCacheSim's every 2^20 (docs/eviction.md)")
	return rep, curves, nil
}

// PlotPaths names one PNG per trace from path: path itself for a single
// trace, else path with -TRACE before its extension.
func PlotPaths(path string, traces []string) []string {
	if len(traces) == 1 {
		return []string{path}
	}
	ext := filepath.Ext(path)
	base := strings.TrimSuffix(path, ext)
	if ext == "" {
		ext = ".png"
	}
	out := make([]string, len(traces))
	for i, t := range traces {
		out[i] = base + "-" + t + ext
	}
	return out
}

// PlotCurves draws the miss-ratio curves, one PNG per trace (PlotPaths), and
// returns the files written.
func PlotCurves(path string, curves []Curve) ([]string, error) {
	var traces []string
	for _, c := range curves {
		if !contains(traces, c.Trace) {
			traces = append(traces, c.Trace)
		}
	}
	paths := PlotPaths(path, traces)
	for i, t := range traces {
		var series []plot.Series
		for _, c := range curves {
			if c.Trace == t {
				series = append(series, plot.Series{Name: c.Policy, X: c.Percents, Y: c.MissRatios})
			}
		}
		if err := plot.LineChart(paths[i], "Miss ratio, "+t+" trace", "cache size (% of distinct objects)", "miss ratio", series); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
