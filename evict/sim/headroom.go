package sim

import (
	"fmt"

	"github.com/cistern-ebpf/cistern/evict"
)

// Figure is one cache's misses over a trace.
type Figure struct {
	Name   string `json:"name"`
	Misses uint64 `json:"misses"`
	// MissesPer1000Reads is the figure compared with a live run's pages
	// loaded per 1000 reads.
	MissesPer1000Reads float64 `json:"misses_per_1000_reads"`
	VsOPT              float64 `json:"vs_opt"`    // misses / OPT's
	VsKernel           float64 `json:"vs_kernel"` // misses / the kernel model's
}

// Report is a trace's headroom at one cache size: the kernel's default
// (model), Belady's OPT, the two frequency references, and each policy
// replayed in the kernel.
type Report struct {
	CapacityPages int    `json:"capacity_pages"`
	Reads         uint64 `json:"reads"`
	PageReads     uint64 `json:"page_reads"`
	OPT           Figure `json:"opt"`
	Kernel        Figure `json:"kernel_model"`
	// HistoryLFU and OracleLFU: what counting can learn online, and what
	// knowing the popularity in advance gives (lfu.go).
	HistoryLFU Figure   `json:"history_lfu"`
	OracleLFU  Figure   `json:"oracle_lfu"`
	Policies   []Figure `json:"policies"`
	// Best is the policy with the fewest misses, and BestGainPct how many
	// fewer misses it has than the kernel model, in percent (negative:
	// none beats the model).
	Best        string  `json:"best"`
	BestGainPct float64 `json:"best_gain_pct"`
}

// Headroom replays keys (one per page access) at capacity pages under OPT,
// the kernel model and each policy (package evict names, replayed in the
// kernel), counting the misses of keys[from:] (the accesses before warm
// each cache); reads is how many read calls keys[from:] came from.
func Headroom(keys []uint64, from int, reads uint64, capacity int, policies []string) (Report, error) {
	if capacity < 1 {
		return Report{}, fmt.Errorf("cache size %d pages: want at least 1", capacity)
	}
	from = min(max(from, 0), len(keys))
	r := Report{CapacityPages: capacity, Reads: reads, PageReads: uint64(len(keys) - from)}
	per := func(m uint64) float64 {
		if reads == 0 {
			return 0
		}
		return 1000 * float64(m) / float64(reads)
	}
	r.OPT = Figure{Name: "opt", Misses: OPT(keys, capacity, from)}
	r.HistoryLFU = Figure{Name: "history_lfu", Misses: HistoryLFU(keys, capacity, from)}
	r.OracleLFU = Figure{Name: "oracle_lfu", Misses: OracleLFU(keys, capacity, from)}
	kern, pols, err := Compare(keys, from, capacity, policies)
	if err != nil {
		return r, err
	}
	r.Kernel, r.Policies = kern, pols
	fill := func(f *Figure) {
		f.MissesPer1000Reads = per(f.Misses)
		if r.OPT.Misses > 0 {
			f.VsOPT = float64(f.Misses) / float64(r.OPT.Misses)
		}
		if r.Kernel.Misses > 0 {
			f.VsKernel = float64(f.Misses) / float64(r.Kernel.Misses)
		}
	}
	fill(&r.OPT)
	fill(&r.Kernel)
	fill(&r.HistoryLFU)
	fill(&r.OracleLFU)
	for i := range r.Policies {
		fill(&r.Policies[i])
		if r.Best == "" || r.Policies[i].Misses < r.policy(r.Best).Misses {
			r.Best = r.Policies[i].Name
		}
	}
	if b := r.policy(r.Best); b != nil && r.Kernel.Misses > 0 {
		r.BestGainPct = 100 * (1 - float64(b.Misses)/float64(r.Kernel.Misses))
	}
	return r, nil
}

func (r *Report) policy(name string) *Figure {
	for i := range r.Policies {
		if r.Policies[i].Name == name {
			return &r.Policies[i]
		}
	}
	return nil
}

// Compare counts the misses of keys[from:] (keys before from warm each
// cache) at capacity pages under the kernel model and each policy,
// replayed in the kernel: what `--policy auto` weighs on its sample.
func Compare(keys []uint64, from, capacity int, policies []string) (kernel Figure, pols []Figure, err error) {
	from = min(max(from, 0), len(keys))
	kernel = Figure{Name: "kernel", Misses: Kernel(keys, capacity, from)}
	reqs := make([]evict.Request, len(keys))
	for i, k := range keys {
		reqs[i] = evict.Request{Key: k, Size: 1}
	}
	for _, p := range policies {
		m, err := replayMisses(p, reqs, from, capacity)
		if err != nil {
			return kernel, pols, fmt.Errorf("replay %s: %w", p, err)
		}
		pols = append(pols, Figure{Name: p, Misses: m})
	}
	return kernel, pols, nil
}

// replayMisses runs reqs through policy in the kernel and returns the
// misses of reqs[from:].
func replayMisses(policy string, reqs []evict.Request, from, capacity int) (uint64, error) {
	c, err := evict.Open(evict.Config{Policy: policy, Capacity: uint32(min(capacity, 1<<30))})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Replay(reqs[:from], nil); err != nil {
		return 0, err
	}
	hits, err := c.Replay(reqs[from:], nil)
	if err != nil {
		return 0, err
	}
	return uint64(len(reqs)-from) - hits, nil
}
