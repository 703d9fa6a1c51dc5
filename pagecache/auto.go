package pagecache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/evict/sim"
	"github.com/cistern-ebpf/cistern/pagecache/pctrace"
)

// AutoPolicy is the --policy name of the policy chooser.
const AutoPolicy = "auto"

// DefaultAutoMarginPct is auto's default margin: what the agent costs a
// workload, in misses it must save to break even (docs/pagecache.md). 25 %
// was measured while W-TinyLFU's admission was broken (its 18-20 %
// simulated gain ran 0.93-1.04x the default); with it fixed, 22-30 % on
// fio's zipf reads ran 1.03-1.28x at 0.77x the loads, and started
// mid-run over the seeded cache it loads 0.87x the default's pages (0.82x
// from the start). Those zipf runs were a replay (the bench's measured fio
// repeated its warm-up's sequence, docs/pagecache.md "Session 20"); as one
// sequence W-TinyLFU's gain there is 12-14 %, under the margin. YCSB's
// best candidates sit at 0.2-9 %: under it.
const DefaultAutoMarginPct = 15

// autoExitFraction: a running policy is kept while its gain after loss
// stays above this fraction of the margin, so that a gain near the margin
// does not start and stop it decision after decision (each start pays
// the switch; full zipf f2/f3 at margin 25 flapped at 21.8-25 %).
const autoExitFraction = 2.0 / 3

// AutoConfig configures `--policy auto`: a spatially sampled shadow
// simulation (SHARDS) of the candidates and of the kernel's default on the
// cgroup's live reads, which runs the best candidate only while it beats
// the default by more than Margin, and otherwise steps aside: no policy,
// nothing evicted, only the sampled tracepoints attached.
type AutoConfig struct {
	Config // Dir, Cgroup, Limit, Headroom, AccessSample of the agent it runs
	// Candidates (default: every policy SimPolicies names).
	Candidates []string
	// Interval between decisions (default 10 s).
	Interval time.Duration
	// Window is how many sampled page reads a decision weighs, the newest
	// (default 1<<18).
	Window int
	// MarginPct: a candidate runs only if it misses this much less than the
	// kernel model in simulation, after what it was measured to lose live
	// (default DefaultAutoMarginPct): what the agent itself costs.
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
	Best    string  // the candidate with the most gain after its measured loss
	GainPct float64 // its simulated misses below the kernel model's, in percent
	// LossPct is what each candidate that ran lost live against its
	// simulated gain, in points (absent: not measured yet).
	LossPct map[string]float64
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
	// polPages: the candidates' simulated cache, the share of the limit
	// an agent keeps filled (Occupancy), at the sampling rate.
	polPages int

	// The shadow caches run on the sample without pause: each decision
	// feeds them the reads sampled since the last one. The kernel model
	// is the Go model (evict/sim), the candidates are the policies'
	// replay objects, loaded once.
	kern    *sim.KernelModel
	shadows map[string]*evict.Cache
	// pending: the sampled pages read since the last decision, in order.
	// With AccessSample N, a read is Unseen (the policy is not told of a
	// hit) unless it is one of the 1 in N the agent would report, drawn as
	// the tracker draws them, per read (want_read): the candidates are
	// simulated as they will run.
	pending []evict.Request
	rng     *rand.Rand
	// reads: each thread's latest read, whose later batches (the same
	// file and end, further on) continue it (readCont).
	reads  map[uint32]readCont
	loaded uint64 // sampled pages the kernel added since then (in cost units: missCost)
	// scanners: the declared scanners' process and thread ids (ScanPIDs,
	// AddScanPID); copied on write, read on every sampled event.
	scanners atomic.Pointer[map[uint32]bool]
	outs     []evict.Outcome // feed's per-request outcomes, reused
	recs     []autoRecord
	// Live check: the default's live misses over the kernel model's
	// (defRatio, measured while auto stands aside), the running policy's
	// since it started (run), and each policy's measured loss.
	defRatio float64
	run      autoRecord
	runRecs  int
	loss     map[string]float64
	// A proposed policy starts once the samples after its proposal
	// (fresh, at least confirmSamples) show it ahead by the margin too.
	proposed    string
	confirm     autoRecord
	confirmNeed int // the fresh samples that confirm it
	// backoff: candidates whose proposals went unconfirmed, proposed
	// again only after more sampled reads each time (proposalBackoff).
	backoff map[string]proposalBackoff
	// ready: the proposed policy's agent, started in the background
	// (objects loaded, tracking) but not evicting while the proposal
	// waits: the start is most of a switch (the full search's tree: 0.9 s
	// to load, 0.6 s to register its 78k files, 1.8 s to seed 246k cached
	// pages), and made in line it held the sampler and the decisions 3 s,
	// so that the switch proposed early in the loop's second pass landed
	// in its third. The tree is now walked while the policy loads, and
	// the seed ends after the switch (Config.seedLater).
	ready *prepared
	// held: a confirmed decision waiting for its agent's start to end; it
	// takes effect as soon as the agent is ready (Run).
	held *Decision
	bg   sync.WaitGroup // the background starts and closes of agents
	// dry: decisions only, no agent started (a recorded trace replayed
	// through auto's decisions).
	dry bool
	// standby: get-scan's agent was started in the background once
	// scanners were declared (standBy).
	standby bool
	// onDeclaration: get-scan runs because scanners were declared, from
	// before the default was ever measured (runDeclared); it is judged by
	// its live loads against the kernel model's default (declaredCheck).
	onDeclaration bool
	// glance: the best candidate's gain after loss at the last look, on
	// glanceN counted samples (also when too few to decide on), and the
	// kernel model's misses per 1000 of them.
	glance, glanceKernel float64
	glanceN              int
	// counted: sampled reads counted since the start; fewer than Window,
	// the window is still filling.
	counted uint64

	mu      sync.Mutex
	agent   *Agent
	stopRun func()
	// loop: the running Run's cancel and end, for Close (a test's fatal
	// path closed auto under a running Run, which then resumed a closed
	// sampler's reads: a panic in a 6.1 guest).
	loopCancel context.CancelFunc
	loopDone   chan struct{}
	last       Decision
	// stopped: the counters of the agent stopped last (the exit
	// summary's, once no agent runs).
	stopped map[string]uint64

	// Standing aside, settled: once nothing has run or been proposed for
	// asideSettled intervals, the sampler is detached for asideRest
	// intervals out of every asideRest+1 (resting), which takes most of
	// auto's cost off a workload it leaves to the kernel; a decision that
	// runs a policy, or proposes one, ends it.
	asideSince time.Time // since when nothing ran or was proposed
	awake      time.Time // sampling again since
	restLeft   int
	rests      atomic.Uint64 // intervals the sampler rested
	resting    atomic.Bool

	samples, decisions, switches atomic.Uint64
	// loads: sampled pages the kernel added to the cgroup (the live
	// check's measure, in pages).
	loads atomic.Uint64
	// shadowNS: time spent feeding the shadows (CPU-bound: the kernel
	// model in Go, the candidates in the kernel through test runs).
	shadowNS atomic.Uint64
}

// prepared is a proposed policy's agent, started in the background.
type prepared struct {
	policy string
	done   chan struct{} // closed once ag, err, took are set
	ag     *Agent
	err    error
	took   time.Duration // the start's time
}

func (p *prepared) started() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// autoRecord is one interval of the sample: its reads, the pages really
// loaded, each shadow's misses, and what ran. Loads and misses are in
// cost units (missCost): pages, unless scanners are declared.
type autoRecord struct {
	reads, loaded, kernel uint64
	misses                map[string]uint64
	running               string
	fresh                 bool // the first interval after a switch
}

// ScanMissWeight: with scanners declared (Config.ScanPIDs, AddScanPID), a
// point reader's missed page costs this many of a scanner's. A point read
// that misses waits for one I/O of its own; a scan's miss shares its
// read's I/O with the rest of the read (at least DefaultScanReadPages
// pages) and costs the device's bandwidth: 1/32 + 1/64 of a point miss at
// most, and the scan's service objective is the relaxed one (the cachebpf
// paper's GET-SCAN: scans in the background, GETs served first). Counted
// in pages, the synthetic GET-SCAN part is the scan's loop: its 1.5 GB
// file outweighed the GETs 24:1 in the sample, and a frequency policy that
// kept part of the loop looked best while it lost the GETs (session 29).
const ScanMissWeight = 32

// missCost is a sampled page's miss in cost units: 1, or with scanners
// declared ScanMissWeight for a point reader's and 1 for a scanner's.
func (a *Auto) missCost(scan bool) uint64 {
	if a.declared() && !scan {
		return ScanMissWeight
	}
	return 1
}

// declared: scanners were named (ScanPIDs, AddScanPID). auto then tells a
// scanner's reads by its ids, not by their size, weighs misses by
// ScanMissWeight, and measures the default's cost live (defaultCost).
func (a *Auto) declared() bool {
	m := a.scanners.Load()
	return m != nil && len(*m) > 0
}

func (a *Auto) isScanner(tgid, tid uint32) bool {
	m := a.scanners.Load()
	return m != nil && ((*m)[tgid] || (*m)[tid])
}

// AddScanPID declares a process or thread whose reads are scans: auto's
// get-scan candidate puts what it reads on its scan list, and auto's
// objective weighs its misses below the point readers' (ScanMissWeight).
// The get-scan agent auto runs or starts gets it too.
func (a *Auto) AddScanPID(pid int) error {
	if pid <= 0 || pid > math.MaxUint32 {
		return fmt.Errorf("auto: scan pid %d: want a process or thread id", pid)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[uint32]bool{uint32(pid): true}
	if old := a.scanners.Load(); old != nil {
		for k := range *old {
			m[k] = true
		}
	}
	a.scanners.Store(&m)
	return registerScanners(a.agent, []int{pid})
}

// scanPIDs are the declared scanners.
func (a *Auto) scanPIDs() []int {
	var ids []int
	if m := a.scanners.Load(); m != nil {
		for k := range *m {
			ids = append(ids, int(k))
		}
	}
	sort.Ints(ids)
	return ids
}

// registerScanners gives pids to ag if it runs a policy that takes
// scanners (nil or another policy: nothing to do).
func registerScanners(ag *Agent, pids []int) error {
	if ag == nil {
		return nil
	}
	if row, err := evict.Lookup(ag.cfg.Policy, evict.PageCache); err != nil || !row.ScanIDs {
		return nil
	}
	for _, p := range pids {
		if err := ag.AddScanPID(p); err != nil {
			return err
		}
	}
	return nil
}

// AutoPolicies are auto's candidates: the policies the trace replay
// simulates, and get-scan with its scanners told by their reads' size
// (Config.ScanReadPages): the sample carries each read's size, which
// replay has not.
func AutoPolicies() []string { return append(SimPolicies(), "get-scan") }

// setDefaults checks the candidates and fills in the defaults.
func (cfg *AutoConfig) setDefaults() error {
	if len(cfg.Candidates) == 0 {
		cfg.Candidates = AutoPolicies()
	}
	for _, c := range cfg.Candidates {
		if !slices.Contains(AutoPolicies(), c) {
			return fmt.Errorf("auto: candidate %q: want some of %s", c, strings.Join(AutoPolicies(), ", "))
		}
	}
	if cfg.ScanReadPages == 0 {
		cfg.ScanReadPages = DefaultScanReadPages
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Window <= 0 {
		cfg.Window = 1 << 18
	}
	if cfg.MarginPct <= 0 {
		cfg.MarginPct = DefaultAutoMarginPct
	}
	return nil
}

// StartAuto validates cfg, opens the cgroup, loads the shadow caches and
// attaches the sampler.
func StartAuto(cfg AutoConfig) (_ *Auto, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--dir %s: not a directory", cfg.Dir)
	}
	a := &Auto{cfg: cfg, shadows: map[string]*evict.Cache{}, loss: map[string]float64{}, rng: rand.New(rand.NewPCG(1, 2))}
	for _, p := range cfg.ScanPIDs {
		if err := a.AddScanPID(p); err != nil {
			return nil, err
		}
	}
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
	if err = a.openShadows(limit); err != nil {
		return nil, err
	}
	if a.sampler, err = openTrackerOpts(cfg.Dir, a.cg.ID, true, 1, a.bits); err != nil {
		return nil, err
	}
	a.last = Decision{At: time.Now(), Reason: "no decision yet: the kernel's default runs while the sample fills"}
	return a, nil
}

// openShadows sizes the sample for a cgroup limit of limit bytes and
// loads the shadow caches.
func (a *Auto) openShadows(limit int64) error {
	limitPages := int(limit / pageSize)
	a.bits = a.cfg.SampleBits
	if a.bits == 0 && limitPages > 2048 {
		a.bits = uint(bits.Len(uint(limitPages/2048))) - 1
	}
	a.pages = max(limitPages>>a.bits, 1)
	a.polPages = max(int(float64(a.pages)*Occupancy(limit, a.cfg.Headroom)), 1)
	a.kern = sim.NewKernelModel(a.pages)
	for _, c := range a.cfg.Candidates {
		var err error
		if a.shadows[c], err = evict.Open(evict.Config{Policy: c, Capacity: uint32(a.polPages)}); err != nil {
			return fmt.Errorf("auto: shadow %s: %w", c, err)
		}
	}
	return nil
}

// Cgroup is the cgroup auto manages.
func (a *Auto) Cgroup() *Cgroup { return a.cg }

// SampleRate is the share of pages sampled (1/2^bits) and the simulated
// cache size in pages (the kernel model's; the candidates' is the share
// an agent keeps filled).
func (a *Auto) SampleRate() (bits uint, pages int) { return a.bits, a.pages }

// Decision is the latest decision.
func (a *Auto) Decision() Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// asideSettled intervals in which nothing ran or was proposed settle auto
// aside (on a full sample); then the sampler rests asideRest intervals of
// every asideRest+1, and samples a whole interval between rests. The
// shadows' CPU and the sampler's run time in the workload's reads were
// 4.0 % of a core [3.5-4.4] on the quick zipf part (85k reads/s, one
// page in 8 sampled) with auto aside in every round; a change of workload
// is seen at most asideRest intervals later.
//
// A look at a window where the kernel model hit at least one sampled page
// in ten (reuseMissesPer1000) settles auto after asideSettledReuse
// intervals instead: reuse tells the policies apart, and that window
// (zipf, uniform reads, RocksDB's skewed reads) is the workload's own.
// Auto stood aside on quick zipf at 4.6 % of a core (the sampler's BPF
// 1.6, the shadows 2.2) and rested only after the 6 s measured run
// (session 31). A window without reuse, where every policy misses alike
// (a loop's first pass, a scan), does not: the next pass may favour one
// (the search's MRU), and auto waits asideSettled intervals.
const (
	asideSettled       = 3
	asideSettledReuse  = 1
	asideRest          = 3
	reuseMissesPer1000 = 900
)

// Run samples reads and decides every Interval until ctx ends.
func (a *Auto) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	a.mu.Lock()
	if a.sampler == nil {
		a.mu.Unlock()
		cancel()
		return errors.New("auto: closed")
	}
	a.loopCancel, a.loopDone = cancel, done
	a.mu.Unlock()
	defer close(done)
	defer cancel()
	defer a.stopAgent()
	next := time.Now().Add(a.cfg.Interval)
	var rec ringbuf.Record
	for ctx.Err() == nil {
		if a.restLeft > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Until(next)):
			}
			a.rests.Add(1)
			next = time.Now().Add(a.cfg.Interval)
			if a.restLeft--; a.restLeft == 0 {
				// Not resting from before the reads are attached again:
				// stored after, a read counted in between was counted "while
				// resting" (a 6.1 guest's TestAutoFollowsTheWorkload: 18372
				// then 18373).
				a.resting.Store(false)
				if err := a.sampler.resumeReads(); err != nil {
					return fmt.Errorf("auto: resume sampling: %w", err)
				}
				a.awake = time.Now()
				// The live measure starts again: the first interval after
				// the rest is the shadows' catching up (fresh), and a run
				// on the declaration is judged again on what follows.
				a.run, a.runRecs = autoRecord{}, 0
			}
			continue
		}
		a.standBy()
		if err := a.runDeclared(); err != nil {
			return err
		}
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
		// Until the first decision, while a proposal waits for its
		// confirmation, and while the window is still filling, the sample
		// is fed as it comes and decided on as soon as it suffices, not an
		// interval later: a first decision taken on a young sample (zipf's
		// first seconds: S3-FIFO 6.9 % ahead, then W-TinyLFU 23 % once the
		// frequencies showed) otherwise held for an interval (10 s), longer
		// than a short run.
		if a.held != nil && a.ready != nil && a.ready.started() {
			if err := a.takeHeld(); err != nil {
				return err
			}
		}
		early := (a.decisions.Load() == 0 || a.awaiting() || a.counted < uint64(a.cfg.Window)) && len(a.pending) >= stepSamples
		if early || time.Now().After(next) {
			if err := a.decide(); err != nil {
				return err
			}
			next = time.Now().Add(a.cfg.Interval)
			if err := a.settle(); err != nil {
				return err
			}
		}
	}
	return nil
}

// standBy starts get-scan's agent in the background, not evicting, as
// soon as scanners are declared and before the first decision: the
// declaration names get-scan's use, and where it wins it wins a race. On
// GET-SCAN the default loses most of the hot set within ~1.5 s of the
// scan's start, and a lost page comes back one random read at a time;
// get-scan, proposed 0.7 s in, ran from 1.2-1.7 s in after its agent's
// start (0.4-0.6 s: the verifier, the walk, the seed), at 0.61x the
// get-scan agent's GETs. The first decision that does not propose it
// drops it (decideOn), so standing aside costs its tracking until then.
func (a *Auto) standBy() {
	if a.standby || a.dry || a.ready != nil || a.decisions.Load() > 0 || !a.declared() || !slices.Contains(a.cfg.Candidates, "get-scan") {
		return
	}
	a.standby = true
	a.prepare("get-scan")
}

// runDeclared runs get-scan as soon as its agent, started on the
// declaration (standBy), is ready, before any decision: declared scanners
// name get-scan's use, as they do for `cache agent --policy get-scan`.
// Waiting to see the default lose first cost GET-SCAN most of its hot
// set: proposed on the default's first live GET misses, ~0.5 s after the
// scan started, get-scan ran from 1.0-1.3 s in and the lost pages came
// back one random read at a time (0.695x the get-scan agent's GETs,
// session 30). It is then kept only while declaredCheck passes.
func (a *Auto) runDeclared() error {
	p := a.ready
	if !a.awaitingDeclared() || !p.started() || p.err != nil || a.Decision().Policy != "" {
		return nil
	}
	d := Decision{Policy: p.policy, Best: p.policy,
		Reason: fmt.Sprintf("get-scan runs on the declared scanners (its agent started in %.1f s), before the default is measured; it is kept while it loads no more than %.1f%% over the kernel model's default", p.took.Seconds(), declaredTolerance(a.cfg.MarginPct))}
	if err := a.runDecision(d); err != nil {
		return err
	}
	a.onDeclaration = true
	return nil
}

// runDecision switches to d's policy, outside decideOn (a held decision,
// the declared run), and shows d.
func (a *Auto) runDecision(d Decision) error {
	if err := a.switchTo(d.Policy); err != nil {
		return err
	}
	a.switches.Add(1)
	a.run, a.runRecs = autoRecord{}, 0
	d.At = time.Now()
	a.mu.Lock()
	a.last = d
	a.mu.Unlock()
	if a.cfg.OnDecision != nil {
		a.cfg.OnDecision(d)
	}
	return nil
}

// awaitingDeclared: get-scan's agent, started on the declaration, is not
// running yet, and nothing else has run: decisions wait for it. Taken on
// the default's live measure during GET-SCAN's warm-up (1.2-2.9x the
// model, before the scan), they proposed get-scan first and ran it from
// the same moment, but judged it against that measure: 20-45 points
// "lost", and S3-FIFO replaced it (quick run, session 31).
func (a *Auto) awaitingDeclared() bool {
	p := a.ready
	return a.standby && !a.onDeclaration && !a.dry && a.switches.Load() == 0 &&
		p != nil && p.policy == "get-scan" && (!p.started() || p.err == nil)
}

// declaredTolerance: get-scan run on the declaration is kept while its
// live loads exceed the kernel model's default by at most this many
// percent, the margin: the sample's noise, the readahead that the live
// count holds and the model (one page a miss) does not, and the model's
// own optimism here. Fed the trace of point readers that get-scan keeps
// fast, the model keeps their pages at that pace, where under the default
// they slow down as they miss and lose more (full GET-SCAN, session 31:
// get-scan loaded 57-62 % under the model in quiet rounds and 6-7 % over
// it in rounds where the disk was shared, at half the margin's edge). A
// declaration the model does not bear out ends in the default, measured.
func declaredTolerance(margin float64) float64 { return margin }

// declaredCheck judges get-scan run on the declaration, while the default
// is not measured: kept while what the cgroup loaded since it started is
// within declaredTolerance of the kernel model's default on the same
// samples; otherwise auto steps aside, and the default is measured live
// (defRatio) before anything runs again. ok is false while too few
// samples have been counted to tell.
//
// A clear pass, loads under the model's by the margin or more, is taken
// on clearSamples (GET-SCAN: 50-60 % under it, in a quarter of the
// samples): the sampler rests sooner.
func (a *Auto) declaredCheck() (livePct float64, ok bool) {
	if a.run.kernel == 0 || a.run.reads < uint64(a.clearSamples()) {
		return 0, false
	}
	livePct = 100 * (1 - float64(a.run.loaded)/float64(a.run.kernel))
	return livePct, a.run.reads >= uint64(a.minSamples()) || livePct >= a.cfg.MarginPct
}

// settle rests the sampler once nothing has run or been proposed for
// asideSettled intervals, on at least a decision's worth of samples, and
// the sampler has been awake a whole interval since its last rest.
func (a *Auto) settle() error {
	now := time.Now()
	if a.declaredSettled() {
		return a.rest()
	}
	if a.Decision().Policy != "" || a.awaiting() || a.asideSince.IsZero() {
		a.asideSince = now
		return nil
	}
	// A decision's worth of samples, or a clear count where no candidate
	// comes within half the margin: RocksDB's skewed reads, the best 6-7 %
	// after 4,096 samples, reach minSamples only 44 s into the run at one
	// page in 128, and the sampler cost them 3 % of a core until then.
	need := uint64(a.minSamples())
	if a.glanceN >= a.clearSamples() && a.glance < a.cfg.MarginPct/2 {
		need = uint64(a.clearSamples())
	}
	if now.Sub(a.asideSince) < a.settleAfter() || a.counted < need || now.Sub(a.awake) < a.cfg.Interval {
		return nil
	}
	return a.rest()
}

// settleAfter is how long auto stands aside before it rests: one interval
// when the last look at the sample saw reuse (the kernel model missed at
// most reuseMissesPer1000 of every 1000 sampled pages), else
// asideSettled. With declared scanners the model's misses are weighed by
// cost, not counted, and auto waits asideSettled.
func (a *Auto) settleAfter() time.Duration {
	if a.glanceN > 0 && !a.declared() && a.glanceKernel <= reuseMissesPer1000 {
		return asideSettledReuse * a.cfg.Interval
	}
	return asideSettled * a.cfg.Interval
}

// declaredSettled: get-scan, run on the declared scanners, has passed its
// live check (declaredCheck) on a decision's worth of samples since the
// sampler last woke. The sampler then rests as it does aside: it costs
// every read of the cgroup ~0.23 µs (pc_read, session 30), on GET-SCAN's
// 1.4 µs GETs as much again as the get-scan agent's own tracking, and the
// check is taken again on the samples after each rest.
func (a *Auto) declaredSettled() bool {
	if !a.onDeclaration || a.Decision().Policy == "" || a.awaiting() {
		return false
	}
	live, ok := a.declaredCheck()
	return ok && live >= -declaredTolerance(a.cfg.MarginPct)
}

// rest detaches the sampler for asideRest intervals.
func (a *Auto) rest() error {
	if err := a.sampler.pauseReads(); err != nil {
		return fmt.Errorf("auto: rest the sampler: %w", err)
	}
	a.restLeft = asideRest
	a.resting.Store(true)
	return nil
}

// add keeps the sampled pages of one read, and counts the sampled pages
// of a folio the kernel added (what the cgroup really loaded).
func (a *Auto) add(e pctrace.Event) {
	switch e.Op {
	case pctrace.OpRead:
		if e.Flags&pctrace.FlagWrite != 0 {
			return // the sampler takes no writes (keepPrograms); the shadows are read-based
		}
		// Every page of the read is the kernel model's (the kernel reads
		// them all); the policies look up its first PC_MAX_ACC_PAGES
		// (maxAccPages) of each batch, and hear of the others only as
		// they are added: for the shadows those are Unseen.
		readEnd := e.Index + uint64(max(e.Nr, 1))
		end := e.Index + uint64(min(max(e.Nr, 1), maxSampledReadPages))
		from, to := e.Index, min(e.Index+maxAccPages, end)
		c, cont := a.reads[e.TID]
		if cont = cont && c.file == e.File && c.end == readEnd && e.Index > c.first; cont {
			from = max(from, c.covered)
		} else {
			c = readCont{file: e.File, end: readEnd, scan: max(e.Nr, 1) >= a.cfg.ScanReadPages}
			if a.declared() {
				c.scan = a.isScanner(e.TGID, e.TID)
			}
			if s := a.cfg.AccessSample; s > 1 {
				c.unseen = a.rng.Uint32()&(s-1) != 0
			}
		}
		c.first, c.covered = e.Index, max(c.covered, end)
		if a.reads == nil || len(a.reads) >= 1<<14 {
			a.reads = map[uint32]readCont{} // threads come and go
		}
		a.reads[e.TID] = c
		for p := from; p < end; p++ {
			k := pctrace.Key(e.File, p)
			if ShardsSampled(k, a.bits) {
				a.pending = append(a.pending, evict.Request{Key: k, Size: 1, Unseen: c.unseen || p >= to, Scan: c.scan})
				a.samples.Add(1)
			}
		}
	case pctrace.OpAdd:
		// The folio's reader added it: a scanner's load or a point
		// reader's (missCost).
		// Every page of the folio (pc_add sends it when any is sampled).
		w := a.missCost(a.isScanner(e.TGID, e.TID))
		for p := uint64(0); p < uint64(1)<<min(e.Order, 9); p++ {
			if ShardsSampled(pctrace.Key(e.File, e.Index+p), a.bits) {
				a.loaded += w
				a.loads.Add(1)
			}
		}
	}
}

// maxAccPages is PC_MAX_ACC_PAGES (cistern/pagecache.h): the pages of one
// read batch a policy looks up; maxSampledReadPages is
// PC_SHARDS_MAX_PAGES: the pages of one read the sampler looks at.
const (
	maxAccPages         = 64
	maxSampledReadPages = 1 << 16
)

// readCont is a thread's latest read as the sampler reported it. One
// read(2) calls filemap_get_pages once per batch of folios, and each call
// is reported as the rest of the read (pctrace.Event.Nr); the sampler,
// which keeps no read state in the kernel, reports every batch that holds
// a sampled page, so a cold 4 MiB read's sampled pages came twice
// (TestAutoSamplerCountsAReadOnce: 992 sampled reads of 513 pages): hits
// to every shadow, and a second touch that moves a page to the kernel
// model's active list, which the kernel does not do. A later batch of the
// same file and end, further on, continues the read: only its pages past
// covered are new, and it shares the read's draw of the access sample, as
// the agent's tracker does (pc_read).
type readCont struct {
	file       uint32
	first, end uint64 // the latest batch's first page; the read's end (exclusive)
	covered    uint64 // pages before this were sampled in this read
	unseen     bool
	scan       bool // a read of ScanReadPages or more (EVICT_REQ_SCAN)
}

// proposalBackoff: a candidate whose proposal was not confirmed n times is
// proposed again once auto has counted until sampled reads: after
// confirmSamples << (n-1) more (at most << maxBackoff). Each proposal
// starts its agent in the background, and on the quick GET-SCAN part, its
// best candidate's gain hovering at the margin, W-TinyLFU was proposed
// and not confirmed seven times in a 3 s run: loading the agents' objects
// (the verifier) took 3.3 s of CPU per run, 79 % of the bench process's
// CPU, and 0.3 s went to the shadows.
type proposalBackoff struct {
	n     int
	until uint64
}

const maxBackoff = 6

// confirmSamples: the fresh sampled reads after a proposal that must show
// the proposed policy ahead by the margin before it starts; the early
// decisions (first, confirming) are fed in steps of this many.
const confirmSamples = 2048

// stepSamples: the early decisions are fed in steps of this many, and a
// candidate ahead by four times the margin is decided on, and confirmed
// by, this many: at 1024 samples a miss ratio's standard error is ~1.5
// points, and such a gain is 60 points (the search's loop: ~65 %, where
// the sample grows by ~1-2k a pass and the larger counts cost auto two of
// its ten passes).
const stepSamples = 1024

// samplesFor is how many counted samples a decision needs when the best
// candidate's gain after loss is eff.
func (a *Auto) samplesFor(eff float64) int {
	switch {
	case eff >= 4*a.cfg.MarginPct:
		return stepSamples
	case eff >= 2*a.cfg.MarginPct:
		return a.clearSamples()
	}
	return a.minSamples()
}

// clearSamples: a decision may come before minSamples when the best
// candidate is ahead by twice the margin on at least this many counted
// samples and the simulated cache's worth (a loop's second pass: MRU ~60 %
// ahead within a pass, where waiting for minSamples cost the search two
// of its ten passes). A transient still needs its confirmation.
func (a *Auto) clearSamples() int { return min(max(a.pages, 4096), a.minSamples()) }

// awaiting: a policy was proposed and is not confirmed yet.
func (a *Auto) awaiting() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proposed != "" && a.proposed != a.last.Policy
}

// minSamples a decision needs once the shadows are warm: four times the
// simulated cache, and at least 16384 (about 1600 misses at a 10 % miss
// ratio). With twice the cache and 8192, 6.1 and 6.12 guests' first
// decisions on zipf saw W-TinyLFU 61-91 % ahead of the kernel model, where
// the steady state is 0-20 %.
func (a *Auto) minSamples() int { return min(max(4*a.pages, 16384), a.cfg.Window) }

// feed runs the reads sampled since the last decision through every
// shadow cache and returns them as one record. Reads until the kernel
// model has missed its cache once (filled it: until then every page is
// new to every shadow) warm the shadows and are not counted. It was twice
// (turned over once more) after a 6.12 guest's first decision on zipf saw
// S3-FIFO 46 % ahead; that was the test's fio replaying one sequence in
// every run (a loop), not the fill, and on the search's loop the second
// fill cost auto a pass (94 MiB cgroup: its first decision in the 4th of
// 10 searches). A transient still needs its confirmation.
func (a *Auto) feed() (autoRecord, error) {
	reqs := a.pending
	w := 0 // reqs[:w] only warm
	for i, rq := range reqs {
		if a.kern.Misses < uint64(a.pages) {
			a.kern.Access(rq.Key)
			w = i + 1
			continue
		}
		break
	}
	r := autoRecord{reads: uint64(len(reqs) - w), loaded: a.loaded, misses: map[string]uint64{}}
	if w > 0 { // the loads of this record partly warmed: not a live measure
		r.fresh = true
	}
	counted := reqs[w:]
	for _, rq := range counted {
		if !a.kern.Access(rq.Key) { // the kernel sees every read
			r.kernel += a.missCost(rq.Scan)
		}
	}
	if cap(a.outs) < len(counted) {
		a.outs = make([]evict.Outcome, len(counted))
	}
	outs := a.outs[:len(counted)]
	for name, c := range a.shadows {
		if _, err := c.Replay(reqs[:w], nil); err != nil {
			return r, fmt.Errorf("auto: shadow %s: %w", name, err)
		}
		if _, err := c.Replay(counted, outs); err != nil {
			return r, fmt.Errorf("auto: shadow %s: %w", name, err)
		}
		var cost uint64
		for i, o := range outs {
			if !o.Hit {
				cost += a.missCost(counted[i].Scan)
			}
		}
		r.misses[name] = cost
	}
	a.pending, a.loaded = a.pending[:0], 0
	return r, nil
}

// decide feeds the shadows and, with enough counted samples, decides.
func (a *Auto) decide() error {
	t0 := time.Now()
	r, err := a.feed()
	a.shadowNS.Add(uint64(time.Since(t0)))
	if err != nil {
		return err
	}
	return a.decideOn(r)
}

// decideOn decides on the shadows' record r of the reads since the last
// decision.
func (a *Auto) decideOn(r autoRecord) error {
	a.held = nil // decided again below
	a.mu.Lock()
	cur := a.last.Policy
	a.mu.Unlock()
	r.running = cur
	r.fresh = r.fresh || a.runRecs == 0
	a.runRecs++
	if r.reads == 0 {
		return nil
	}
	if !a.dry { // a replay's loads are the trace's, not the policy's
		a.measureLive(r)
	}
	a.recs = append(a.recs, r)
	// The newest records within Window sampled reads (at least one).
	n, keep := 0, len(a.recs)
	for i := len(a.recs) - 1; i >= 0; i-- {
		if n > 0 && n+int(a.recs[i].reads) > a.cfg.Window {
			break
		}
		n += int(a.recs[i].reads)
		keep = i
	}
	a.recs = a.recs[keep:]
	a.counted += r.reads
	// Weighed: the newest records, at least half the window (and
	// stepSamples): the older half of a young window is the cache's fill,
	// where every policy misses alike (zipf: W-TinyLFU's 21-25 % showed as
	// 15 % over the whole window 15 s into the run; the search's loop:
	// the first pass's tail, cold to every policy, held its second pass's
	// 65 % under 60 %). While a policy runs, at least minSamples of the
	// window: leaving a policy loses its history, and half a young window
	// can be shorter than the workload's cycle (the search's loop: each
	// pass's ends favour the kernel's recency, its middle MRU; weighed on
	// the end of one pass and the start of the next, LHD beat the MRU
	// running and replaced it, and the next pass ran 2.2x slower). How
	// many samples a decision needs is counted on the whole window
	// (samplesFor).
	var kern uint64
	pol := map[string]uint64{}
	w, least := 0, stepSamples
	if cur != "" {
		least = max(least, min(n, a.minSamples()))
	}
	for i := len(a.recs) - 1; i >= 0 && (w < n/2 || w < least); i-- {
		r := a.recs[i]
		w += int(r.reads)
		kern += r.kernel
		for name, m := range r.misses {
			pol[name] += m
		}
	}
	if a.proposed != "" {
		a.confirm.reads += r.reads
		a.confirm.kernel += r.kernel
		for name, m := range r.misses { // every candidate's: a better one may replace the proposal
			a.confirm.misses[name] += m
		}
	}
	if n == 0 || n < stepSamples {
		return nil // not enough to tell: what runs keeps running
	}
	if a.awaitingDeclared() {
		return nil // get-scan runs on the declaration as soon as it is ready (runDeclared)
	}
	if a.declared() && a.defRatio == 0 && !a.dry && !(a.onDeclaration && cur != "") {
		return nil // the default's cost not measured live yet (defaultCost)
	}
	kc := a.defaultCost(kern)
	d := Decision{At: time.Now(), Samples: w, LossPct: maps.Clone(a.loss),
		MissesPer1000: map[string]float64{"kernel": 1000 * kc / float64(w)}}
	gain := map[string]float64{}
	// What a policy is expected to lose live: what it lost when it last
	// ran, and for one never measured, what the running one loses. The
	// loss is mostly the mechanism's (headroom, late evictions, a cache
	// rebuilt after the switch), the same for every policy; counted for
	// the running policy alone, any candidate it had not measured looked
	// ahead of it (full GET-SCAN: get-scan, 13 points lost while the GETs'
	// pages came back, was replaced by S3-FIFO with a simulated gain 3
	// points above get-scan's, and the switch cost 1.2-2 s).
	loss := func(p string) float64 {
		if l, ok := a.loss[p]; ok {
			return l
		}
		if cur != "" {
			return a.loss[cur]
		}
		return 0
	}
	for _, c := range a.cfg.Candidates {
		d.MissesPer1000[c] = 1000 * float64(pol[c]) / float64(w)
		if kc > 0 {
			gain[c] = 100 * (1 - float64(pol[c])/kc)
		}
		// What a policy is expected to save: its simulated gain less what
		// it is expected to lose live.
		if d.Best == "" || gain[c]-loss(c) > gain[d.Best]-loss(d.Best) {
			d.Best = c
		}
	}
	d.GainPct = gain[d.Best]
	eff := func(p string) float64 { return gain[p] - loss(p) }
	a.glance, a.glanceN, a.glanceKernel = eff(d.Best), n, d.MissesPer1000["kernel"]
	if n < a.samplesFor(eff(d.Best)) {
		return nil // not clear yet: wait for more
	}
	a.decisions.Add(1)
	lossNote := func(p string) string {
		if l, ok := a.loss[p]; ok {
			return fmt.Sprintf(", %.1f points of it lost live when it ran", l)
		}
		return ""
	}
	livePct, measured := a.declaredCheck()
	switch {
	case a.onDeclaration && cur != "":
		// Run on the declaration: nothing replaces it but the default,
		// and only once it is measured to load more than the model's
		// default; the candidates' gains are against a default not seen
		// (or seen only before the scan: GET-SCAN's warm-up).
		d.Policy = cur
		switch {
		case !measured:
			d.Reason = fmt.Sprintf("%s runs on the declared scanners; its live loads against the kernel model's default are counted over %d sampled reads (%d so far)", cur, a.minSamples(), a.run.reads)
		case livePct >= -declaredTolerance(a.cfg.MarginPct):
			d.Reason = fmt.Sprintf("%s runs on the declared scanners: the cgroup loaded %.1f%% %s than the kernel model's default on the same samples (the default itself not run; tolerance %.1f%%)", cur, math.Abs(livePct), moreLess(livePct), declaredTolerance(a.cfg.MarginPct))
		default:
			d.Policy = ""
			a.onDeclaration = false
			d.Reason = fmt.Sprintf("stepped aside: %s, run on the declared scanners, loaded %.1f%% more than the kernel model's default on the same samples (tolerance %.1f%%); the kernel's default runs and is measured live before anything runs again", cur, -livePct, declaredTolerance(a.cfg.MarginPct))
		}
	case eff(d.Best) >= a.cfg.MarginPct:
		d.Policy = d.Best
		// Hysteresis: a running policy is kept unless the new best beats
		// it by half the margin too (switching loses the policy's history).
		if cur != "" && cur != d.Best && eff(cur) >= a.cfg.MarginPct && eff(d.Best)-eff(cur) < a.cfg.MarginPct/2 {
			d.Policy = cur
		}
		d.Reason = fmt.Sprintf("%s misses %.1f%% less than the kernel's default in the shadow simulation%s (margin %.0f%%)", d.Policy, gain[d.Policy], lossNote(d.Policy), a.cfg.MarginPct)
	case cur != "" && eff(cur) >= autoExitFraction*a.cfg.MarginPct:
		d.Policy = cur
		d.Reason = fmt.Sprintf("%s keeps running: it misses %.1f%% less than the kernel's default in the shadow simulation%s, under the %.0f%% margin to start but over the %.0f%% to stop", cur, gain[cur], lossNote(cur), a.cfg.MarginPct, autoExitFraction*a.cfg.MarginPct)
	default:
		d.Reason = fmt.Sprintf("stepped aside: the best candidate, %s, misses %.1f%% less than the kernel's default in the shadow simulation%s, under the %.0f%% the agent costs; the kernel's default runs, nothing is evicted", d.Best, d.GainPct, lossNote(d.Best), a.cfg.MarginPct)
	}
	// A policy starts only once the sampled reads after its proposal (at
	// least confirmSamples) show it ahead by the margin too: one sample can
	// mislead (6.1 and 6.12 guests' first decisions on zipf saw W-TinyLFU
	// 57-68 % ahead, their next ones -9 %). Stepping aside needs no
	// confirmation.
	// A proposal still ahead by the margin is kept, not replaced by each
	// new best of a growing window (the search: MRU proposed at 100 %
	// early in the loop's second pass, W-TinyLFU best a moment later),
	// unless the new best beats it by half the margin, as a running policy
	// is kept; the new best is then confirmed on the same samples since
	// the proposal (every candidate's misses are counted on them), so
	// that the confirmation does not start again.
	if a.proposed != "" && d.Policy != "" && d.Policy != cur && d.Policy != a.proposed && eff(a.proposed) >= a.cfg.MarginPct && eff(d.Policy)-eff(a.proposed) < a.cfg.MarginPct/2 {
		d.Reason = fmt.Sprintf("%s misses %.1f%% less than the kernel's default in the shadow simulation%s (margin %.0f%%; proposed before %s, now best at %.1f%%)",
			a.proposed, gain[a.proposed], lossNote(a.proposed), a.cfg.MarginPct, d.Policy, gain[d.Policy])
		d.Policy = a.proposed
	}
	proposed, lastProposed := d.Policy, a.proposed
	if b, ok := a.backoff[d.Policy]; ok && d.Policy != cur && d.Policy != "" && a.proposed == "" && a.counted < b.until {
		d.Reason = fmt.Sprintf("%s %.1f%% fewer simulated misses than the kernel's default, but its last %d proposals were not confirmed: proposed again after %d more sampled reads; %s runs meanwhile", d.Policy, gain[d.Policy], b.n, b.until-a.counted, policyName(cur))
		d.Policy, proposed = cur, ""
	}
	if d.Policy != cur && d.Policy != "" {
		if a.proposed == "" {
			a.proposed, a.confirm = proposed, autoRecord{misses: map[string]uint64{}}
			a.confirmNeed = confirmSamples
			if eff(proposed) >= 4*a.cfg.MarginPct {
				a.confirmNeed = stepSamples
			}
			a.prepare(proposed)
			d.Policy = cur
			d.Reason = fmt.Sprintf("%s proposed (%.1f%% fewer simulated misses than the kernel's default), to be confirmed by the next %d sampled reads; %s runs meanwhile", proposed, gain[proposed], a.confirmNeed, policyName(cur))
		} else {
			if a.proposed != proposed { // a better one replaces it
				a.proposed = proposed
				a.prepare(proposed)
			}
			fg := 0.0
			if kc := a.defaultCost(a.confirm.kernel); kc > 0 {
				fg = 100 * (1 - float64(a.confirm.misses[proposed])/kc)
			}
			switch {
			case a.confirm.reads < uint64(a.confirmNeed):
				d.Policy = cur
				d.Reason = fmt.Sprintf("%s proposed, %d of the %d sampled reads that confirm it seen; %s runs meanwhile", proposed, a.confirm.reads, a.confirmNeed, policyName(cur))
			case a.confirm.kernel == 0 || fg-loss(proposed) < a.cfg.MarginPct:
				d.Policy = cur
				d.Reason = fmt.Sprintf("%s proposed but not confirmed: %.1f%% fewer simulated misses than the kernel's default on the %d sampled reads since, under the %.0f%% margin; %s runs", proposed, fg, a.confirm.reads, a.cfg.MarginPct, policyName(cur))
				proposed = ""
			}
		}
	}
	if proposed == "" || proposed == d.Policy {
		if lastProposed != "" && d.Policy != lastProposed && proposed != lastProposed {
			// Withdrawn (not confirmed, or no longer ahead): backed off.
			b := a.backoff[lastProposed]
			b.until = a.counted + uint64(confirmSamples)<<min(b.n, maxBackoff)
			b.n++
			if a.backoff == nil {
				a.backoff = map[string]proposalBackoff{}
			}
			a.backoff[lastProposed] = b
		}
		a.proposed = ""
	}
	if a.ready != nil && a.ready.policy != a.proposed && a.ready.policy != d.Policy {
		a.dropReady() // its proposal went
	}
	if d.Policy != cur && d.Policy != "" && a.ready != nil && a.ready.policy == d.Policy && !a.ready.started() {
		// Confirmed, its agent still starting: what runs keeps running
		// until it is ready, and the sample keeps being read meanwhile.
		held := d
		a.held = &held
		a.proposed = d.Policy
		d.Policy = cur
		d.Reason = fmt.Sprintf("%s confirmed (%.1f%% fewer simulated misses than the kernel's default); it runs once its agent has started (loaded, tracking; the cgroup's cached pages follow); %s runs meanwhile", held.Policy, gain[held.Policy], policyName(cur))
	}
	if d.Policy != cur {
		if err := a.switchTo(d.Policy); err != nil {
			return err
		}
		delete(a.backoff, d.Policy) // confirmed
		a.switches.Add(1)
		a.run, a.runRecs = autoRecord{}, 0
	}
	if a.declared() {
		def := "the default's as the kernel model's, not measured live yet"
		if a.defRatio > 0 {
			def = fmt.Sprintf("the default's as measured live, %.2fx the kernel model's", a.defRatio)
		}
		d.Reason += fmt.Sprintf(" (misses weighed: a declared scanner's page 1, a point reader's %d; %s)", ScanMissWeight, def)
	}
	a.mu.Lock()
	// Shown: a change of policy, the first decision and a new proposal.
	changed := a.last.Policy != d.Policy || a.last.Samples == 0 || (a.proposed != "" && a.proposed != lastProposed)
	a.last = d
	a.mu.Unlock()
	if changed && a.cfg.OnDecision != nil {
		a.cfg.OnDecision(d)
	}
	return nil
}

func moreLess(pct float64) string {
	if pct < 0 {
		return "more"
	}
	return "less"
}

// takeHeld runs the held decision's policy, its agent now started.
func (a *Auto) takeHeld() error {
	d := *a.held
	a.held = nil
	if p := a.ready; p != nil && p.policy == d.Policy {
		d.Reason += fmt.Sprintf("; its agent started in %.1f s", p.took.Seconds())
	}
	a.proposed = ""
	if err := a.runDecision(d); err != nil {
		return err
	}
	delete(a.backoff, d.Policy) // confirmed
	return nil
}

// defaultCost is the kernel's default's cost on sampled reads the kernel
// model missed k (cost units) of. With scanners declared it is the
// default's as measured: the model's times what the cgroup loaded live
// over the model's misses while the default ran (defRatio). There the
// objective is the point readers' misses, and those are what the model,
// which works in pages, gets wrong: it sees neither the folio sizes the
// kernel gives a file (GET-SCAN's hot file, read in 1 MiB reads, held 42
// of its 72 MiB in 2 MiB folios and 30 MiB in small ones, of which the
// default lost most within ~1.5 s) nor the point readers slowed down by
// their misses (a GET that waits on the disk reads 300x less: the sample
// holds few of them once they all miss). The model kept every GET where
// the default lost them: 961 and 960 simulated misses per 1000 for the
// kernel and get-scan (session 29). Elsewhere the model's misses are the
// default's, as measured by the bench (live/simulated within 5 %).
func (a *Auto) defaultCost(k uint64) float64 {
	if a.declared() && a.defRatio > 0 {
		return float64(k) * a.defRatio
	}
	return float64(k)
}

// measureLive compares what the cgroup really loaded with the kernel
// model's misses on the same sample. Under the default that ratio is the
// model's own error on this workload (defRatio); under a policy, the
// policy's live gain is 1 - ratio/defRatio, and what it falls short of its
// simulated gain on the same intervals is its loss: the mechanism's cost
// in misses (headroom, late or refused evictions), which later decisions
// subtract. The first interval after a switch belongs to neither.
func (a *Auto) measureLive(r autoRecord) {
	for p := range a.loss { // an old measure fades: the workload may have changed
		if p != r.running {
			a.loss[p] *= 0.98
		}
	}
	if r.fresh || r.kernel == 0 {
		return
	}
	ratio := float64(r.loaded) / float64(r.kernel)
	if r.running == "" {
		if a.defRatio == 0 {
			a.defRatio = ratio
		} else {
			a.defRatio = (a.defRatio + ratio) / 2
		}
		return
	}
	a.run.reads += r.reads
	a.run.loaded += r.loaded
	a.run.kernel += r.kernel
	if a.run.misses == nil {
		a.run.misses = map[string]uint64{}
	}
	a.run.misses[r.running] += r.misses[r.running]
	if a.defRatio == 0 || a.run.kernel == 0 || a.run.reads < uint64(a.minSamples()) {
		return
	}
	live := 100 * (1 - float64(a.run.loaded)/float64(a.run.kernel)/a.defRatio)
	simulated := 100 * (1 - float64(a.run.misses[r.running])/float64(a.run.kernel))
	a.loss[r.running] = max(simulated-live, 0)
}

// switchTo stops the running agent, if any, and starts policy ("" runs
// none: the kernel's default).
func (a *Auto) switchTo(policy string) error {
	a.stopAgent()
	if policy == "" || a.dry {
		return nil
	}
	var ag *Agent
	if p := a.ready; p != nil && p.policy == policy {
		a.ready = nil
		<-p.done
		ag = p.ag // nil if its start failed: started again below, to report why
	} else {
		a.dropReady()
	}
	if ag == nil {
		var err error
		if ag, err = a.startAgent(policy); err != nil {
			return err
		}
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
	// Scanners declared while its agent started (AddScanPID).
	if err := registerScanners(ag, a.scanPIDs()); err != nil {
		fmt.Fprintf(os.Stderr, "auto: %s: %v\n", policy, err)
	}
	a.agent = ag
	a.stopRun = func() { cancel(); <-done }
	a.mu.Unlock()
	return nil
}

func (a *Auto) startAgent(policy string) (*Agent, error) {
	cfg := a.cfg.Config
	cfg.Policy, cfg.Cgroup, cfg.Limit = policy, a.cg.Path, 0
	cfg.seedLater = true // the switch does not wait for the seed
	cfg.ScanPIDs = nil
	if row, err := evict.Lookup(policy, evict.PageCache); err != nil || !row.ScanIDs {
		cfg.ScanReadPages = 0 // the others take no scanners
	} else if a.declared() {
		// Declared scanners, as the shadow told them: by their ids only.
		cfg.ScanPIDs, cfg.ScanReadPages = a.scanPIDs(), 0
	}
	ag, err := Start(cfg)
	if err != nil {
		return nil, fmt.Errorf("auto: start %s: %w", policy, err)
	}
	return ag, nil
}

// prepare starts the proposed policy's agent in the background, without
// running it; a start that fails is left to the switch, which reports it.
func (a *Auto) prepare(policy string) {
	if a.dry || (a.ready != nil && a.ready.policy == policy) {
		return
	}
	a.dropReady()
	p := &prepared{policy: policy, done: make(chan struct{})}
	a.ready = p
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		t0 := time.Now()
		p.ag, p.err = a.startAgent(policy)
		p.took = time.Since(t0)
		close(p.done)
	}()
}

// dropReady closes the prepared agent, once its start ends.
func (a *Auto) dropReady() {
	p := a.ready
	if p == nil {
		return
	}
	a.ready = nil
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		<-p.done
		if p.ag != nil {
			p.ag.Close()
		}
	}()
}

func (a *Auto) stopAgent() {
	a.mu.Lock()
	ag, stop := a.agent, a.stopRun
	a.agent, a.stopRun = nil, nil
	a.mu.Unlock()
	if ag != nil {
		stop()
		if st, err := ag.Stats(); err == nil {
			a.mu.Lock()
			a.stopped = st
			a.mu.Unlock()
		}
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

// ProgramRuntime is the time auto's BPF programs have run so far in the
// threads they trace: the sampler's, and the running agent's if a policy
// runs. Zero unless BPF run-time statistics are on (ebpf.EnableStats with
// BPF_STATS_RUN_TIME); the shadow caches' test runs are in auto's own
// thread, not here.
func (a *Auto) ProgramRuntime() (time.Duration, error) {
	var total time.Duration
	if a.sampler != nil {
		d, _, err := collRuntime(a.sampler.coll)
		if err != nil {
			return 0, err
		}
		total = d
	}
	if ag := a.Agent(); ag != nil {
		d, _, err := ag.ProgramRuntime()
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// Stats are auto's counters (auto_policy_<name> is 1 for the policy
// running, auto_policy_default while none does) and the running agent's.
func (a *Auto) Stats() (map[string]uint64, error) {
	st := map[string]uint64{
		"auto_samples": a.samples.Load(), "auto_decisions": a.decisions.Load(), "auto_switches": a.switches.Load(),
		"auto_shadow_us":      a.shadowNS.Load() / 1000,
		"auto_sampled_loads":  a.loads.Load(),
		"auto_rest_intervals": a.rests.Load(),
	}
	if a.resting.Load() {
		st["auto_resting"] = 1
	} else {
		st["auto_resting"] = 0
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
	for p, l := range d.LossPct {
		st["auto_loss_pct_"+p] = uint64(max(l, 0))
	}
	a.mu.Lock()
	as := a.stopped
	a.mu.Unlock()
	if ag := a.Agent(); ag != nil {
		if cur, err := ag.Stats(); err == nil {
			as = cur
		}
	}
	for k, v := range as {
		st[k] = v
	}
	return st, nil
}

// Close stops any agent, detaches the sampler and removes the cgroup if
// auto made it.
func (a *Auto) Close() error {
	a.mu.Lock()
	cancel, done := a.loopCancel, a.loopDone
	a.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	a.stopAgent()
	var errs []error
	a.dropReady()
	a.bg.Wait()
	a.mu.Lock()
	sampler := a.sampler
	a.sampler = nil
	a.mu.Unlock()
	if sampler != nil {
		errs = append(errs, sampler.Close())
	}
	for name, c := range a.shadows {
		errs = append(errs, c.Close())
		delete(a.shadows, name)
	}
	if a.cg != nil {
		errs = append(errs, a.cg.Close())
		a.cg = nil
	}
	return errors.Join(errs...)
}

// policyName is a decision's policy as said to a user.
func policyName(p string) string {
	if p == "" {
		return "the kernel's default"
	}
	return p
}
