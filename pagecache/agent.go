package pagecache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/thread"
)

const pageSize = 4096

// DefaultScanReadPages is Config.ScanReadPages for auto and `cache agent
// --scan-reads`: 32 pages, 128 KiB. A point read (a RocksDB block, a
// memcached value, a 4 KiB GET) is a page or four; ripgrep's buffer is 64
// KiB; a scanner's reads are its readahead window (RocksDB's iterator
// grows to 256 KiB) or a buffer of 1 MiB and more.
const DefaultScanReadPages = 32

// Config describes one agent.
type Config struct {
	Dir      string // files watched: the regular files under Dir, also those created later
	Cgroup   string // memory cgroup (see OpenCgroup)
	Limit    int64  // > 0: create the cgroup with this limit
	Policy   string // one of Policies()
	ScanPIDs []int  // get-scan, scan-only: processes or threads whose insertions are scans
	// ScanReadPages (get-scan, scan-only): a thread whose latest read
	// asked for at least this many pages is a scanner, and the folios it
	// adds are scans, with no pid registered (0: only ScanPIDs).
	// DefaultScanReadPages suits most: a point read is a block or a
	// value, a scan's read a readahead window or a large buffer.
	ScanReadPages uint32
	// Headroom is how far below the limit the agent starts evicting,
	// fixed; never more than half of the limit. 0: adaptive (see
	// setWatermarks), from max(limit/256, 1 MiB) up.
	Headroom int64
	// AccessSample reports one read in AccessSample (a power of 2; 0 or 1:
	// every read) to policies that use accesses.
	AccessSample uint32
	// seedLater: Start returns before the seed, which Run applies when it
	// ends (auto's switches; see Agent.seedDone).
	seedLater bool
}

// Agent runs a policy over the page cache of one directory in one cgroup.
type Agent struct {
	cfg       Config
	cg        *Cgroup
	tr        *tracker
	pol       *policy
	limit     int64
	high, low int64
	// Adaptive headroom (Config.Headroom 0): head is the current one,
	// between headMin and headMax; limitHits the cgroup's count when it
	// last changed.
	head, headMin, headMax int64
	limitHits, limitHits0  uint64
	headAt                 time.Time
	headGrown, headShrunk  atomic.Uint64
	headNow                atomic.Int64
	// What was cached before the start, told to the policy (seed.go).
	// seedMu guards seeded once the seed runs in the background; seedDone
	// then brings its events to Run, and seedStop ends it early (Close).
	seedMu   sync.Mutex
	seeded   seedStats
	seedDone chan seedResult
	seedStop atomic.Bool
	seedWG   sync.WaitGroup

	// Counters (read by Stats from other goroutines).
	evictRuns, victims, pagesEvicted     atomic.Uint64
	failOpen, failFadvise, stillDirty    atomic.Uint64
	stillWriteback, stillBusy, pressured atomic.Uint64
	retried, cpuMicros                   atomic.Uint64
	// runCPU0: the Run thread's CPU clock when Run began (0: not running),
	// so that Stats counts a running agent's CPU too (auto's agents are
	// read while they run).
	runCPU0 atomic.Int64
	// Wakeups by the policy; runs where it proposed nothing while the
	// cgroup was above high (the kernel's reclaim then does the work);
	// pages of victims already gone when evicted.
	woken, declined, gonePages atomic.Uint64
	// fadvise(DONTNEED) calls and the wall time the agent spent in them: a
	// range the kernel cannot drop at once (a folio still in a CPU's LRU
	// batch, or held by a reader) makes it drain every CPU's batches.
	fadvCalls, fadvNanos, fadvMaxNanos atomic.Uint64
	// evictNanos: the CPU time of Run's thread in evict (its fadvise
	// calls and their checks), by the thread's own clock: fadvNanos is
	// wall time, and counts the moments the thread was not running.
	evictNanos atomic.Uint64
	// The agent thread's context switches while Run ran: voluntary ones
	// are its wakeups (each may preempt a workload thread).
	wakeups, preempted atomic.Uint64
	tid                atomic.Int32 // Run's thread, while it runs
	// The start's steps, from Start's call: the policy loaded (the
	// verifier), the tree walked (beside the load), the files registered
	// and the programs attached; and the seed, after them.
	startLoad, startWalk, startTrack, startSeed time.Duration

	// Victims still cached after fadvise (under I/O, locked, dirty): tried
	// again at the next step, up to maxTries, before they count as not
	// evicted and go back to the policy.
	pending []Victim
	// Victims given up on, to be tracked again (queued with the next
	// pc_apply).
	back []Event
	// evictedPages per file id: read only after Run returns (tests).
	evictedPages map[uint32]int64
	// fds of the files victims came from, kept open while the agent runs
	// (an open and a close per file per step cost the scanner's CPU too).
	fds map[uint32]*os.File
}

const maxTries = 32

// maxOpenFiles bounds the fds kept open for eviction (the process shares
// its fd limit with whatever else it runs).
const maxOpenFiles = 64

// Start sets up the cgroup, the policy and the tracker; Run then drives
// them until its context ends, and Close undoes everything.
func Start(cfg Config) (_ *Agent, err error) {
	row, err := evict.Lookup(cfg.Policy, evict.PageCache)
	if err != nil {
		return nil, err
	}
	if len(cfg.ScanPIDs) > 0 && !row.ScanIDs {
		return nil, fmt.Errorf("policy %s takes no scanner ids", cfg.Policy)
	}
	if cfg.ScanReadPages > 0 && !row.ScanIDs {
		return nil, fmt.Errorf("policy %s does not tell scans apart (scan detection is for get-scan, scan-only)", cfg.Policy)
	}
	if cfg.ScanReadPages > 0 && row.ScanIDs && !row.Accesses {
		// scan-only takes no reads: the thread's read size is not seen
		return nil, fmt.Errorf("policy %s takes no reads, so it cannot tell a scanner by its read size: give --scan-pid", cfg.Policy)
	}
	if s := cfg.AccessSample; s > 1 && s&(s-1) != 0 {
		return nil, fmt.Errorf("access sample %d: want a power of 2", s)
	}
	if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--dir %s: not a directory", cfg.Dir)
	}
	a := &Agent{cfg: cfg, evictedPages: map[uint32]int64{}, fds: map[uint32]*os.File{}}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if a.cg, err = OpenCgroup(cfg.Cgroup, cfg.Limit); err != nil {
		return nil, err
	}
	if a.limit, err = a.cg.Limit(); err != nil {
		return nil, fmt.Errorf("read the limit of %s: %w", a.cg.Path, err)
	}
	a.setWatermarks()
	// The cgroup's cache never exceeds its limit, whatever files appear.
	capacity := int64(0)
	if a.limit > 0 {
		capacity = a.limit / pageSize
	} else if capacity, err = dirPages(cfg.Dir); err != nil {
		return nil, fmt.Errorf("--dir %s: %w", cfg.Dir, err)
	}
	capacity = min(max(capacity+4096, 1<<16), 1<<22)
	tc := trackConfig{memcg: a.cg.ID, sample: cfg.AccessSample, scanPages: cfg.ScanReadPages}
	// The tree is walked while the policy loads (the verifier): neither
	// needs the other until the files are registered.
	t0 := time.Now()
	type scanned struct {
		t   *tracker
		err error
		d   time.Duration
	}
	scan := make(chan scanned, 1)
	go func() {
		t, err := scanTracker(cfg.Dir)
		scan <- scanned{t, err, time.Since(t0)}
	}()
	a.pol, err = openPolicy(row, uint32(capacity), tc)
	a.startLoad = time.Since(t0)
	sc := <-scan
	a.startWalk = sc.d
	if err != nil {
		if sc.t != nil {
			sc.t.Close()
		}
		return nil, err
	}
	if sc.err != nil {
		return nil, sc.err
	}
	a.tr = sc.t
	if err = a.tr.bind(a.pol.coll, row.Accesses, false); err != nil {
		return nil, err
	}
	a.startTrack = time.Since(t0)
	for _, pid := range cfg.ScanPIDs {
		if err := a.AddScanPID(pid); err != nil {
			return nil, err
		}
	}
	if row.NewestFirst {
		a.seeded.skipped = true
		return a, nil
	}
	if !cfg.seedLater {
		r := a.seed()
		a.seeded, a.startSeed = r.stats, r.took
		a.back = append(a.back, r.events...)
		return a, nil
	}
	// auto's switch: the agent runs as soon as it tracks, and the pages
	// cached before it reach the policy when the seed ends (1.5-3.7 s on
	// the search's tree beside ripgrep, most of what held the switch).
	// Until then the policy chooses among the pages added since the
	// start; the seed's come after them either way.
	a.seedDone = make(chan seedResult, 1)
	a.seedWG.Add(1)
	go func() {
		defer a.seedWG.Done()
		a.seedDone <- a.seed()
	}()
	return a, nil
}

// takeSeed queues the background seed's events once it has ended.
func (a *Agent) takeSeed() {
	if a.seedDone == nil {
		return
	}
	select {
	case r := <-a.seedDone:
		a.seedDone = nil
		a.seedMu.Lock()
		a.seeded, a.startSeed = r.stats, r.took
		a.seedMu.Unlock()
		a.back = append(a.back, r.events...)
	default:
	}
}

// setWatermarks: the agent evicts from high down to low. The policy wakes
// it as soon as the pages it tracks would put the cgroup at high, so the
// headroom (limit - high) only has to cover the pages the workload adds
// while the agent wakes up. How many that is depends on the workload's
// fill rate and on how soon the agent's thread runs, which no constant
// fits: a fixed max(limit/64, 4 MiB) held a 64 MiB cgroup 7 % below what
// the kernel fills, and still lost the race in an emulated guest. So the
// headroom adapts (unless Config.Headroom fixes it): it starts at
// max(limit/256, 1 MiB), doubles whenever the kernel had to reclaim at the
// limit since the last step (the agent was late: memory.failcnt or
// memory.events max), and shrinks by a quarter after 10 s without, down to
// that floor again; at most max(limit/16, 16 MiB) and a quarter of the
// limit. Each wakeup evicts max(limit/256, 512 KiB), in as few ranges as
// it can.
func (a *Agent) setWatermarks() {
	if a.limit <= 0 {
		return
	}
	if a.head == 0 {
		a.headMin, a.headMax = headroomRange(a.limit, a.cfg.Headroom)
		a.head, a.headAt = a.headMin, time.Now()
		a.limitHits = a.cg.LimitHits()
		a.limitHits0 = a.limitHits
	}
	a.high = a.limit - a.head
	a.low = a.high - evictStep(a.limit)
	a.headNow.Store(a.head)
}

// headroomRange is the adaptive headroom's floor and ceiling for a cgroup
// of limit bytes (both fixed when fixed > 0).
func headroomRange(limit, fixed int64) (lo, hi int64) {
	if fixed > 0 {
		h := min(fixed, limit/2)
		return h, h
	}
	lo = min(max(limit/256, 1<<20), limit/8)
	hi = max(min(max(limit/16, 16<<20), limit/4), lo)
	return lo, hi
}

func evictStep(limit int64) int64 { return max(limit/256, 512<<10) }

// Occupancy is the share of a cgroup of limit bytes the agent keeps filled
// at its smallest headroom: (high - step/2) / limit, what auto simulates
// a candidate policy at.
func Occupancy(limit, fixedHeadroom int64) float64 {
	if limit <= 0 {
		return 1
	}
	lo, _ := headroomRange(limit, fixedHeadroom)
	return max(float64(limit-lo-evictStep(limit)/2)/float64(limit), 0.5)
}

// adaptHeadroom grows the headroom when the kernel reclaimed at the limit
// since the last step, and shrinks it after a quiet while.
func (a *Agent) adaptHeadroom() {
	if a.headMin == a.headMax {
		return
	}
	hits := a.cg.LimitHits()
	switch {
	case hits > a.limitHits:
		a.limitHits = hits
		a.headAt = time.Now()
		if a.head < a.headMax {
			a.head = min(2*a.head, a.headMax)
			a.headGrown.Add(1)
			a.setWatermarks()
		}
	case a.head > a.headMin && time.Since(a.headAt) > headroomQuiet:
		a.headAt = time.Now()
		a.head = max(a.head-a.head/4, a.headMin)
		a.headShrunk.Add(1)
		a.setWatermarks()
	}
}

// headroomQuiet is how long the kernel must not have reclaimed at the
// limit before the headroom shrinks.
const headroomQuiet = 10 * time.Second

// dirPages is how many pages the regular files under dir span.
func dirPages(dir string) (int64, error) {
	var pages int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				pages += (fi.Size() + pageSize - 1) / pageSize
			}
		}
		return nil
	})
	return pages, err
}

// SeedError says why the pages cached before the start could not be told
// to the policy (nil: they were; they are then left to the kernel).
func (a *Agent) SeedError() error {
	a.seedMu.Lock()
	defer a.seedMu.Unlock()
	return a.seeded.err
}

// Cgroup is the agent's memory cgroup (put the workload in it).
func (a *Agent) Cgroup() *Cgroup { return a.cg }

// Files is how many files the agent watches.
func (a *Agent) Files() int { return int(a.tr.nfiles.Load()) }

// WatchMethod says how new files under the directory are noticed:
// "fanotify", or inotify and why.
func (a *Agent) WatchMethod() string { return a.tr.w.Method }

// AddScanPID registers a process or thread id as a scanner (get-scan,
// scan-only).
func (a *Agent) AddScanPID(pid int) error {
	m, ok := a.pol.coll.Maps["getscan_scan_ids"]
	if !ok {
		return fmt.Errorf("policy %s has no scan threads", a.cfg.Policy)
	}
	if err := m.Put(uint32(pid), uint8(1)); err != nil {
		return fmt.Errorf("register scan pid %d: %w", pid, err)
	}
	return nil
}

// How often the agent reads the cgroup's usage when the policy does not
// wake it (memory the policy does not track, other files and anonymous
// memory, grows the usage too): pollNear within an eighth of the limit of
// its high watermark, pollFar below. Each poll is a wakeup of the agent's
// thread (about 60 ns per read of fio's at 20 ms: the overhead bench).
const (
	pollNear = 20 * time.Millisecond
	pollFar  = 100 * time.Millisecond
)

// Run evicts the policy's victims while the cgroup is near its limit,
// until ctx ends. The policy runs in the kernel (apply.bpf.h); Run sleeps
// until the policy wakes it (the pages it tracks reached the threshold Run
// sets) or pollEvery passes.
func (a *Agent) Run(ctx context.Context) error {
	var rec ringbuf.Record
	// The agent must react before the kernel reclaims: its thread runs
	// at a higher priority than the workload (best effort).
	defer thread.Urgent()()
	// The tracker does not apply the deletes this thread's own
	// evictions cause: their folios already left the policy.
	self := a.pol.coll.Variables["pc_self_tid"]
	if err := self.Set(uint32(unix.Gettid())); err != nil {
		return fmt.Errorf("set the agent's thread: %w", err)
	}
	defer self.Set(uint32(0))
	defer a.pol.wakePages.Set(uint64(0))
	a.tid.Store(int32(unix.Gettid()))
	defer a.tid.Store(0)
	var ru0 unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
	v0, n0 := ru0.Nvcsw, ru0.Nivcsw
	a.runCPU0.Store(int64(max(a.ThreadCPU(), 1)))
	defer func() { // the agent's own CPU time, for the benches
		a.runCPU0.Store(0) // before the total grows: Stats never counts twice
		var ru unix.Rusage
		if unix.Getrusage(unix.RUSAGE_THREAD, &ru) == nil {
			d := ru.Utime.Nano() + ru.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			a.cpuMicros.Add(uint64(max(d, 0) / 1000))
			a.wakeups.Add(uint64(max(ru.Nvcsw-v0, 0)))
			a.preempted.Add(uint64(max(ru.Nivcsw-n0, 0)))
		}
	}()
	for ctx.Err() == nil {
		poll, err := a.step()
		if err != nil {
			return err
		}
		a.pol.wake.SetDeadline(time.Now().Add(poll))
		for { // one wakeup is enough: take what is there
			err := a.pol.wake.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return fmt.Errorf("read wakeups: %w", err)
			}
			a.woken.Add(1)
			a.pol.wake.SetDeadline(time.Now())
		}
	}
	return nil
}

// step evicts victims while the cgroup is above its high watermark, down
// to the low one, then sets the pages at which the policy wakes the agent;
// it returns how long to sleep unless woken.
func (a *Agent) step() (time.Duration, error) {
	a.takeSeed()
	if a.limit <= 0 {
		return pollFar, nil
	}
	u, err := a.cg.Usage()
	if err != nil {
		return 0, fmt.Errorf("read cgroup usage: %w", err)
	}
	a.adaptHeadroom()
	u0, runs0 := u, a.evictRuns.Load()
	need := int64(0)
	if u > a.high-chargeSlack {
		need = (u - a.low) / pageSize
		a.pressured.Add(1)
	}
	if len(a.pending) > 0 {
		retry := a.pending
		a.pending = nil
		a.retried.Add(uint64(len(retry)))
		need -= a.evict(retry)
		for _, v := range a.pending {
			need -= int64(v.Pages)
		}
	}
	for need > 0 || len(a.back) > 0 {
		// Pages, not victims: one folio of a scan can be 512 pages.
		want := int(max(min(need, 4096), 0))
		nb := min(len(a.back), batchSize)
		vs, taken, err := a.pol.run(a.back[:nb:nb], want)
		if err != nil {
			return 0, err
		}
		// What the policy's queue did not take (full of the workload's
		// events) goes again with the next run.
		a.back = a.back[taken:]
		if taken == 0 && nb > 0 && len(vs) == 0 && need <= 0 {
			break // the queue is full or the lock busy: the next step
		}
		if len(vs) == 0 {
			if need > 0 { // the kernel reclaims at the limit, as without an agent
				a.declined.Add(1)
				break
			}
			continue // only events were queued (the seed): the rest of them
		}
		a.evictRuns.Add(1)
		need -= a.evict(vs)
		for _, v := range a.pending { // leaving soon: do not take more for them
			need -= int64(v.Pages)
		}
		if len(a.back) >= batchSize-maxVictims {
			break
		}
	}
	if u0 > a.high || a.evictRuns.Load() != runs0 {
		if u, err = a.cg.Usage(); err != nil {
			return 0, fmt.Errorf("read cgroup usage: %w", err)
		}
	}
	if a.evictRuns.Load() != runs0 && u <= a.high {
		// Evicted down to about low: the agent keeps these pages and half
		// a step more on average, whatever else the cgroup holds.
		if err := a.pol.setSizeHint(a.pol.tracked() + uint64(evictStep(a.limit)/pageSize/2)); err != nil {
			return 0, err
		}
	}
	// Wake at the pages that put the usage at high, were the rest of the
	// cgroup's memory to stay as it is (the poll sees when it does not).
	t := int64(a.pol.tracked())
	wake := t + max((a.high-u)/pageSize, 1)
	if err := a.pol.wakePages.Set(uint64(wake)); err != nil {
		return 0, fmt.Errorf("set the wake threshold: %w", err)
	}
	if err := a.pol.woken.Set(uint32(0)); err != nil {
		return 0, fmt.Errorf("rearm the wakeup: %w", err)
	}
	if u < a.high-a.limit/8 {
		return pollFar, nil
	}
	return pollNear, nil
}

// chargeSlack is how coarsely the cgroup's usage moves: a CPU charges its
// memory cgroup MEMCG_CHARGE_BATCH (64) pages at a time and serves the
// next ones from that stock, so the usage read can sit up to 64 pages
// below where the pages tracked say it is. Within it of high the agent
// evicts: waiting for the usage to cross high woke it every few pages
// added for nothing (fio zipf in 256 MiB: 37 wakeups per eviction run,
// 850 a second, each a wakeup IPI sent from the reading thread's CPU).
const chargeSlack = 64 * pageSize

// evict drops the victims' pages and returns how many pages left the
// cache. Victims still cached are kept in a.pending to be tried again;
// those given up on go to a.back (as add events, to be tracked again).
func (a *Agent) evict(vs []Victim) (freed int64) {
	c0 := threadCPUNow()
	defer func() { a.evictNanos.Add(uint64(max(threadCPUNow()-c0, 0))) }()
	for _, v := range vs {
		if v.tries == 0 {
			a.victims.Add(1)
		}
	}
	sort.Slice(vs, func(i, j int) bool {
		if vs[i].File != vs[j].File {
			return vs[i].File < vs[j].File
		}
		return vs[i].Index < vs[j].Index
	})
	for i := 0; i < len(vs); {
		j := i
		for j < len(vs) && vs[j].File == vs[i].File {
			j++
		}
		freed += a.evictFile(vs[i:j])
		i = j
	}
	a.pagesEvicted.Add(uint64(freed))
	return freed
}

// evictFile drops the ranges of vs (one file, sorted), merging adjacent
// folios into one fadvise. What a range's fadvise freed is counted in the
// kernel (pc_self_pages: the deletes on this thread); only a range it did
// not free whole is looked at with cachestat, victim by victim.
func (a *Agent) evictFile(vs []Victim) (freed int64) {
	f := a.fds[vs[0].File]
	if f == nil {
		var err error
		if f, err = os.Open(a.tr.path(vs[0].File)); err != nil {
			a.failOpen.Add(uint64(len(vs)))
			return 0
		}
		if len(a.fds) >= maxOpenFiles { // a tree of many files: close any one
			for id, g := range a.fds {
				g.Close()
				delete(a.fds, id)
				break
			}
		}
		a.fds[vs[0].File] = f
	}
	fd := int(f.Fd())
	for i := 0; i < len(vs); {
		j, end := i+1, uint64(vs[i].Index)+uint64(vs[i].Pages)
		for j < len(vs) && uint64(vs[j].Index) <= end {
			end = max(end, uint64(vs[j].Index)+uint64(vs[j].Pages))
			j++
		}
		start := uint64(vs[i].Index)
		self0 := u64(a.pol.selfPages)
		t0 := time.Now()
		err := unix.Fadvise(fd, int64(start*pageSize), int64((end-start)*pageSize), unix.FADV_DONTNEED)
		d := uint64(time.Since(t0))
		a.fadvCalls.Add(1)
		a.fadvNanos.Add(d)
		if d > a.fadvMaxNanos.Load() {
			a.fadvMaxNanos.Store(d)
		}
		if err != nil {
			a.failFadvise.Add(uint64(j - i))
			i = j
			continue
		}
		dropped := int64(u64(a.pol.selfPages) - self0)
		whole := dropped >= int64(end-start)
		if !whole {
			if cs, err := cachestat(fd, start*pageSize, (end-start)*pageSize); err == nil && cs.Cache == 0 {
				whole = true
			}
		}
		if whole {
			for _, v := range vs[i:j] {
				a.evictedPages[v.File] += int64(v.Pages)
			}
			// Pages no longer cached that this fadvise did not drop:
			// the folios were gone already (the policy proposed them
			// before their delete was applied).
			if gone := int64(end-start) - dropped; gone > 0 {
				a.gonePages.Add(uint64(gone))
			}
			freed += min(dropped, int64(end-start))
			i = j
			continue
		}
		freed += dropped
		for _, v := range vs[i:j] { // some stayed: find which, and why
			c, _ := cachestat(fd, uint64(v.Index)*pageSize, uint64(v.Pages)*pageSize)
			switch {
			case c.Cache == 0:
				a.evictedPages[v.File] += int64(v.Pages)
				continue
			case v.tries+1 < maxTries:

				v.tries++
				a.pending = append(a.pending, v)
				continue
			case c.Dirty > 0:
				a.stillDirty.Add(1)
			case c.Writeback > 0:
				a.stillWriteback.Add(1)
			default:
				a.stillBusy.Add(1) // mapped, locked or in use
			}
			a.back = append(a.back, Event{Op: opAdd, Order: uint8(bits.TrailingZeros32(v.Pages)), File: v.File, Index: uint64(v.Index)})
		}
		i = j
	}
	return freed
}

// Stats are the agent's counters: tracker events, policy decisions and
// evictions, with every victim that stayed cached by reason.
func (a *Agent) Stats() (map[string]uint64, error) {
	if a.tr == nil {
		return nil, errors.New("agent closed")
	}
	st, err := a.tr.stats() // the policy object's pc_track_stats
	if err != nil {
		return nil, err
	}
	ps, err := a.pol.stats()
	if err != nil {
		return nil, err
	}
	for k, v := range ps {
		st[k] = v
	}
	for k, v := range map[string]*atomic.Uint64{
		"evict_runs": &a.evictRuns, "victims": &a.victims, "pages_evicted": &a.pagesEvicted,
		"not_evicted_open_failed": &a.failOpen, "not_evicted_fadvise_failed": &a.failFadvise,
		"not_evicted_dirty": &a.stillDirty, "not_evicted_writeback": &a.stillWriteback,
		"not_evicted_busy": &a.stillBusy, "pressure_checks": &a.pressured, "retried": &a.retried,
		"agent_cpu_us": &a.cpuMicros, "fadvise_calls": &a.fadvCalls,
		"agent_wakeups": &a.wakeups, "agent_preempted": &a.preempted,
		"woken_by_policy": &a.woken, "policy_declined": &a.declined, "victim_pages_gone": &a.gonePages,
	} {
		st[k] = v.Load()
	}
	if base := a.runCPU0.Load(); base > 0 { // read after agent_cpu_us (Run's defer)
		st["agent_cpu_us"] += uint64(max(int64(a.ThreadCPU())-base, 0) / 1000)
	}
	st["fadvise_us"] = a.fadvNanos.Load() / 1000
	st["evict_cpu_us"] = a.evictNanos.Load() / 1000
	st["fadvise_max_us"] = a.fadvMaxNanos.Load() / 1000
	st["cgroup_limit_hits"] = a.cg.LimitHits() - a.limitHits0 // since the start
	st["headroom_bytes"] = uint64(a.headNow.Load())
	a.seedMu.Lock()
	sd, seedTook := a.seeded, a.startSeed
	a.seedMu.Unlock()
	st["seeded_pages"], st["seed_foreign_pages"], st["seeded_files"] = sd.pages, sd.foreign, sd.files
	st["seeded_active_pages"], st["seeded_referenced_pages"] = sd.byHeat[heatActive], sd.byHeat[heatReferenced]
	st["seed_failed"], st["seed_skipped"] = 0, 0
	if sd.err != nil {
		st["seed_failed"] = 1
	}
	if sd.skipped {
		st["seed_skipped"] = 1
	}
	st["headroom_grown"] = a.headGrown.Load()
	st["headroom_shrunk"] = a.headShrunk.Load()
	st["start_load_ms"], st["start_walk_ms"] = uint64(a.startLoad.Milliseconds()), uint64(a.startWalk.Milliseconds())
	st["start_track_ms"], st["start_seed_ms"] = uint64(a.startTrack.Milliseconds()), uint64(seedTook.Milliseconds())
	return st, nil
}

// Close detaches the tracepoints, unloads everything and removes the cgroup
// if the agent created it.
func (a *Agent) Close() error {
	var errs []error
	a.seedStop.Store(true) // a background seed ends at its next file
	a.seedWG.Wait()
	for id, f := range a.fds {
		f.Close()
		delete(a.fds, id)
	}
	if a.tr != nil {
		errs = append(errs, a.tr.Close())
		a.tr = nil
	}
	if a.pol != nil {
		a.pol.Close()
		a.pol = nil
	}
	if a.cg != nil {
		errs = append(errs, a.cg.Close())
		a.cg = nil
	}
	return errors.Join(errs...)
}

// ProgramRuntime is the time the agent's BPF programs (tracker and policy)
// have run so far in the contexts of the processes they trace, and how
// often they ran. It is zero unless BPF run-time statistics are on
// (ebpf.EnableStats with BPF_STATS_RUN_TIME), which the overhead bench turns
// on to measure the agent's cost directly. The programs the agent runs
// itself (pc_apply and the other CISTERN_CALL programs, through
// BPF_PROG_TEST_RUN) are left out: their time is its thread's CPU.
func (a *Agent) ProgramRuntime() (time.Duration, uint64, error) {
	return collRuntime(a.polColl())
}

// ProgramStats are each of the agent's programs' run time and count so
// far, by program name (zero unless BPF run-time statistics are on): where
// its BPF time goes.
func (a *Agent) ProgramStats() (map[string]ebpf.ProgramStats, error) {
	c := a.polColl()
	out := map[string]ebpf.ProgramStats{}
	if c == nil {
		return out, nil
	}
	for name, p := range c.Programs {
		st, err := p.Stats()
		if err != nil {
			return nil, fmt.Errorf("program %s stats: %w", name, err)
		}
		out[name] = *st
	}
	return out, nil
}

// collRuntime sums the run time and run count of c's programs that run in
// traced threads (nil: 0): not its XDP programs, which only the agent runs
// (BPF_PROG_TEST_RUN counts their runs in the statistics too, and their
// time is already the calling thread's CPU).
func collRuntime(c *ebpf.Collection) (time.Duration, uint64, error) {
	var total time.Duration
	var runs uint64
	if c == nil {
		return 0, 0, nil
	}
	for _, p := range c.Programs {
		if p.Type() == ebpf.XDP {
			continue
		}
		st, err := p.Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("program stats: %w", err)
		}
		total += st.Runtime
		runs += st.RunCount
	}
	return total, runs, nil
}

// threadCPUNow is the calling thread's CPU time (Run's thread is locked
// to its OS thread).
func threadCPUNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// ThreadCPU is the CPU time of the thread running Run so far (0 when
// Run is not running), to the nanosecond: the thread's own CPU clock.
func (a *Agent) ThreadCPU() time.Duration {
	tid := a.tid.Load()
	if tid == 0 {
		return 0
	}
	// MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): any thread of this
	// process may read another's clock.
	clk := (^tid)<<3 | 4 | 2
	var ts unix.Timespec
	if err := unix.ClockGettime(clk, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (a *Agent) polColl() *ebpf.Collection {
	if a.pol == nil {
		return nil
	}
	return a.pol.coll
}
