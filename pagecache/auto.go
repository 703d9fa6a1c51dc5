package pagecache

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/cistern-ebpf/cistern/evict/sim"
	"github.com/cistern-ebpf/cistern/pagecache/pctrace"
)

// AutoPolicy is the --policy name of the policy chooser.
const AutoPolicy = "auto"

// AutoConfig configures `--policy auto`: a spatially sampled shadow
// simulation (SHARDS) of the candidates and of the kernel's default on the
// cgroup's live reads, which runs the best candidate only while it beats
// the default by more than Margin, and otherwise steps aside: no policy,
// nothing evicted, only the sampled read tracepoint attached.
type AutoConfig struct {
	Config // Dir, Cgroup, Limit, Headroom, AccessSample of the agent it runs
	// Candidates (default: every policy SimPolicies names).
	Candidates []string
	// Interval between decisions (default 10 s).
	Interval time.Duration
	// Window is how many sampled page reads a decision weighs (default
	// 1<<18): the older half warms the simulated caches, the newer half
	// counts.
	Window int
	// MarginPct: a candidate runs only if it misses this much less than the
	// kernel model in simulation (default 10): what the agent itself costs
	// (its CPU, its headroom, what its evictions miss: docs/pagecache.md).
	MarginPct float64
	// SampleBits: one page in 2^SampleBits is sampled (default: the largest
	// that leaves at least 2048 pages of the cgroup's limit simulated).
	SampleBits uint
	// OnDecision is called with every decision that changes what runs.
	OnDecision func(Decision)
}

// Decision is what auto chose and why.
type Decision struct {
	At      time.Time
	Policy  string  // the policy running; "" while the kernel's default runs
	Best    string  // the candidate with the fewest simulated misses
	GainPct float64 // its misses below the kernel model's, in percent
	Reason  string
	// MissesPer1000 are the simulated misses per 1000 sampled page reads
	// (the kernel model as "kernel").
	MissesPer1000 map[string]float64
	Samples       int // sampled page reads weighed
}

// Auto runs AutoConfig.
type Auto struct {
	cfg     AutoConfig
	cg      *Cgroup
	sampler *tracker
	bits    uint
	pages   int // simulated cache, pages (the limit at the sampling rate)

	mu      sync.Mutex
	agent   *Agent
	stopRun func()
	last    Decision

	window                       []uint64 // ring of sampled page keys
	head                         int
	full                         bool
	samples, decisions, switches atomic.Uint64
}

// StartAuto validates cfg, opens the cgroup and attaches the sampler.
func StartAuto(cfg AutoConfig) (_ *Auto, err error) {
	if len(cfg.Candidates) == 0 {
		cfg.Candidates = SimPolicies()
	}
	for _, c := range cfg.Candidates {
		if !slices.Contains(SimPolicies(), c) {
			return nil, fmt.Errorf("auto: candidate %q: want some of %s", c, strings.Join(SimPolicies(), ", "))
		}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Window <= 0 {
		cfg.Window = 1 << 18
	}
	if cfg.MarginPct <= 0 {
		cfg.MarginPct = 10
	}
	if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--dir %s: not a directory", cfg.Dir)
	}
	a := &Auto{cfg: cfg, window: make([]uint64, cfg.Window)}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if a.cg, err = OpenCgroup(cfg.Cgroup, cfg.Limit); err != nil {
		return nil, err
	}
	limit, err := a.cg.Limit()
	if err != nil || limit <= 0 {
		return nil, fmt.Errorf("auto: cgroup %s has no memory limit: a policy has nothing to choose between without one", a.cg.Path)
	}
	limitPages := int(limit / pageSize)
	a.bits = cfg.SampleBits
	if a.bits == 0 && limitPages > 2048 {
		a.bits = uint(bits.Len(uint(limitPages/2048))) - 1
	}
	a.pages = max(limitPages>>a.bits, 1)
	if a.sampler, err = openTrackerOpts(cfg.Dir, a.cg.ID, true, 1, a.bits); err != nil {
		return nil, err
	}
	a.last = Decision{At: time.Now(), Reason: "no decision yet: the kernel's default runs while the sample fills"}
	return a, nil
}

// Cgroup is the cgroup auto manages.
func (a *Auto) Cgroup() *Cgroup { return a.cg }

// SampleRate is the share of pages sampled (1/2^bits) and the simulated
// cache size in pages.
func (a *Auto) SampleRate() (bits uint, pages int) { return a.bits, a.pages }

// Decision is the latest decision.
func (a *Auto) Decision() Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// Run samples reads and decides every Interval until ctx ends.
func (a *Auto) Run(ctx context.Context) error {
	defer a.stopAgent()
	next := time.Now().Add(a.cfg.Interval)
	var rec ringbuf.Record
	for ctx.Err() == nil {
		dl := time.Now().Add(100 * time.Millisecond)
		if next.Before(dl) {
			dl = next
		}
		a.sampler.rd.SetDeadline(dl)
		for {
			err := a.sampler.rd.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return fmt.Errorf("auto: read samples: %w", err)
			}
			if len(rec.RawSample) >= pctrace.RecordSize {
				a.add(pctrace.Decode(rec.RawSample))
			}
		}
		if time.Now().After(next) {
			if err := a.decide(); err != nil {
				return err
			}
			next = time.Now().Add(a.cfg.Interval)
		}
	}
	return nil
}

// add keeps the sampled pages of one read.
func (a *Auto) add(e pctrace.Event) {
	if e.Op != pctrace.OpRead {
		return
	}
	for p := uint64(0); p < uint64(min(max(e.Nr, 1), 64)); p++ {
		k := pctrace.Key(e.File, e.Index+p)
		if !ShardsSampled(k, a.bits) {
			continue
		}
		a.window[a.head] = k
		a.head++
		if a.head == len(a.window) {
			a.head, a.full = 0, true
		}
		a.samples.Add(1)
	}
}

// keys are the window's samples, oldest first.
func (a *Auto) keys() []uint64 {
	if !a.full {
		return slices.Clone(a.window[:a.head])
	}
	return append(slices.Clone(a.window[a.head:]), a.window[:a.head]...)
}

// minSamples a decision needs: a few times the simulated cache, so that
// the newer half of the window sees reuse beyond a cold start.
func (a *Auto) minSamples() int { return min(4*a.pages, len(a.window)) }

func (a *Auto) decide() error {
	keys := a.keys()
	if len(keys) < a.minSamples() {
		return nil // not enough to tell: what runs keeps running
	}
	from := len(keys) / 2
	kern, pols, err := sim.Compare(keys, from, a.pages, a.cfg.Candidates)
	if err != nil {
		return fmt.Errorf("auto: shadow simulation: %w", err)
	}
	a.decisions.Add(1)
	n := float64(len(keys) - from)
	d := Decision{At: time.Now(), Samples: len(keys), MissesPer1000: map[string]float64{"kernel": 1000 * float64(kern.Misses) / n}}
	var best sim.Figure
	for _, p := range pols {
		d.MissesPer1000[p.Name] = 1000 * float64(p.Misses) / n
		if best.Name == "" || p.Misses < best.Misses {
			best = p
		}
	}
	d.Best = best.Name
	if kern.Misses > 0 {
		d.GainPct = 100 * (1 - float64(best.Misses)/float64(kern.Misses))
	}
	a.mu.Lock()
	cur := a.last.Policy
	a.mu.Unlock()
	switch {
	case d.GainPct >= a.cfg.MarginPct:
		d.Policy = best.Name
		// Hysteresis: a running policy is kept unless the new best beats
		// it by half the margin too (switching loses the policy's history).
		if cur != "" && cur != best.Name {
			if curM, ok := d.MissesPer1000[cur]; ok && curM > 0 && 100*(1-d.MissesPer1000[best.Name]/curM) < a.cfg.MarginPct/2 {
				d.Policy = cur
			}
		}
		d.Reason = fmt.Sprintf("%s misses %.1f%% less than the kernel's default in the shadow simulation (margin %.0f%%)", d.Policy, 100*(1-d.MissesPer1000[d.Policy]/d.MissesPer1000["kernel"]), a.cfg.MarginPct)
	default:
		d.Reason = fmt.Sprintf("stepped aside: the best candidate, %s, misses %.1f%% less than the kernel's default in the shadow simulation, under the %.0f%% the agent costs; the kernel's default runs, nothing is evicted", best.Name, d.GainPct, a.cfg.MarginPct)
	}
	if d.Policy != cur {
		if err := a.switchTo(d.Policy); err != nil {
			return err
		}
		a.switches.Add(1)
	}
	a.mu.Lock()
	changed := a.last.Policy != d.Policy || a.last.Samples == 0
	a.last = d
	a.mu.Unlock()
	if changed && a.cfg.OnDecision != nil {
		a.cfg.OnDecision(d)
	}
	return nil
}

// switchTo stops the running agent, if any, and starts policy ("" runs
// none: the kernel's default).
func (a *Auto) switchTo(policy string) error {
	a.stopAgent()
	if policy == "" {
		return nil
	}
	cfg := a.cfg.Config
	cfg.Policy, cfg.Cgroup, cfg.Limit = policy, a.cg.Path, 0
	ag, err := Start(cfg)
	if err != nil {
		return fmt.Errorf("auto: start %s: %w", policy, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ag.Run(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "auto: %s: %v\n", policy, err)
		}
	}()
	a.mu.Lock()
	a.agent = ag
	a.stopRun = func() { cancel(); <-done }
	a.mu.Unlock()
	return nil
}

func (a *Auto) stopAgent() {
	a.mu.Lock()
	ag, stop := a.agent, a.stopRun
	a.agent, a.stopRun = nil, nil
	a.mu.Unlock()
	if ag != nil {
		stop()
		ag.Close()
	}
}

// Agent is the agent running the chosen policy (nil while auto stands
// aside).
func (a *Auto) Agent() *Agent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.agent
}

// Stats are auto's counters (auto_policy_<name> is 1 for the policy
// running, auto_policy_default while none does) and the running agent's.
func (a *Auto) Stats() (map[string]uint64, error) {
	st := map[string]uint64{
		"auto_samples": a.samples.Load(), "auto_decisions": a.decisions.Load(), "auto_switches": a.switches.Load(),
	}
	if a.sampler != nil {
		if ts, err := a.sampler.stats(); err == nil {
			st["auto_sampled_reads"] = ts["events_read"]
			st["auto_samples_dropped"] = ts["events_dropped"]
		}
	}
	d := a.Decision()
	for _, c := range append([]string{"default"}, a.cfg.Candidates...) {
		st["auto_policy_"+c] = 0
	}
	if d.Policy == "" {
		st["auto_policy_default"] = 1
	} else {
		st["auto_policy_"+d.Policy] = 1
	}
	st["auto_gain_pct"] = uint64(max(d.GainPct, 0))
	if ag := a.Agent(); ag != nil {
		as, err := ag.Stats()
		if err == nil {
			for k, v := range as {
				st[k] = v
			}
		}
	}
	return st, nil
}

// Close stops any agent, detaches the sampler and removes the cgroup if
// auto made it.
func (a *Auto) Close() error {
	a.stopAgent()
	var errs []error
	if a.sampler != nil {
		errs = append(errs, a.sampler.Close())
		a.sampler = nil
	}
	if a.cg != nil {
		errs = append(errs, a.cg.Close())
		a.cg = nil
	}
	return errors.Join(errs...)
}
