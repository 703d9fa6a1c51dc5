package pagecachebench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/pagecache"
)

// The rocksdb workload: the cachebpf paper's key-value experiments on
// RocksDB itself, driven by RocksDB's own db_bench (Debian's rocksdb-tools).
// The database is 4× the cgroup's limit, built once into the cache dir;
// RocksDB's block cache is kept at 8 MiB so that the page cache is the cache
// measured, and reads go through pread (the agent sees buffered reads, not
// mmap faults).

// rdbExpRange is db_bench's --read_random_exp_range for the skewed reads:
// key = num × e^-r, r uniform in [0, 5], scattered over the key space by a
// multiply: a density ∝ 1/key over the e^5 (148×) range of ranks, like Zipf
// with s = 1.
const rdbExpRange = 5

// rdbThreads is how many db_bench threads read (the paper's YCSB runs use
// several client threads; misses wait on the disk, so 4 threads keep more
// than one read in flight on 2 cores).
const rdbThreads = 4

// rdbSetup is the database and the sizes of one run.
type rdbSetup struct {
	db      *servers.RocksDB
	files   []string
	dbBytes int64
	limit   int64
	warm    time.Duration // first readrandom, not measured: fills the cache and trains the policy
	measure time.Duration
	evict   evictCost // the eviction floor (evictfloor.go), measured before the parts
}

func rdbPrepare(ctx context.Context, rep *benchkit.Report, opt Options) (*rdbSetup, error) {
	s := &rdbSetup{limit: 1 << 30, warm: 12 * time.Second, measure: 10 * time.Second}
	if opt.Quick {
		s.limit, s.warm, s.measure = 256<<20, 8*time.Second, 8*time.Second
	}
	var err error
	s.db, err = servers.PrepareRocksDB(ctx, servers.RocksDBOptions{CacheDir: filepath.Join(opt.CacheDir, "rocksdb"), Bytes: 4 * s.limit, Progress: opt.Progress})
	if err != nil {
		return nil, err
	}
	if s.files, s.dbBytes, err = s.db.Files(); err != nil {
		return nil, err
	}
	rep.SetConfig("rocksdb_dir", s.db.Dir)
	rep.SetConfig("rocksdb_bytes", s.dbBytes)
	rep.SetConfig("rocksdb_keys", s.db.Num)
	rep.SetConfig("rocksdb_value_size", s.db.ValueSize)
	rep.SetConfig("rocksdb_cgroup_limit_bytes", s.limit)
	rep.SetConfig("rocksdb_block_cache_bytes", 8<<20)
	rep.SetConfig("rocksdb_read_random_exp_range", rdbExpRange)
	rep.SetConfig("rocksdb_threads", rdbThreads)
	rep.SetConfig("rocksdb_warm_seconds", s.warm.Seconds())
	rep.SetConfig("rocksdb_measure_seconds", s.measure.Seconds())
	if s.evict, err = evictFloor(rep, filepath.Join(opt.CacheDir, "rocksdb"), opt.Progress); err != nil {
		return nil, err
	}
	return s, nil
}

// rdbDrop drops the database's pages: every round starts cold, on a warm
// device (pcDropWarm).
func (s *rdbSetup) rdbDrop() error { return pcDropWarm(s.files) }

// rdbWarmThreads read in the warm-up: more reads in flight fill the
// cgroup sooner (at 4 threads a 1 GiB cgroup took longer than the run).
const rdbWarmThreads = 16

// readRun is the measured readrandom (warm: the warm-up before it, a
// process of its own with more threads and the same keys).
func (s *rdbSetup) readRun(cg string, warm bool) servers.DBBenchRun {
	r := servers.DBBenchRun{Benchmark: "readrandom", Threads: rdbThreads, Duration: s.measure, ExpRange: rdbExpRange, Cgroup: cg}
	if warm {
		r.Threads, r.Duration = rdbWarmThreads, s.warm
	}
	return r
}

// readWarmMeasured runs the warm-up, then the measured readrandom, with
// agents' CPU taken over the measured one.
func (s *rdbSetup) readWarmMeasured(ctx context.Context, cg string, agents []*pagecache.Agent, progress func(string), measured func()) (rdbResult, error) {
	cmd, err := s.db.Command(ctx, s.readRun(cg, true))
	if err != nil {
		return rdbResult{}, err
	}
	wait, err := rdbStart(cmd, "readrandom", nil)
	if err != nil {
		return rdbResult{}, err
	}
	wr, err := wait()
	if err != nil {
		return rdbResult{}, fmt.Errorf("warm-up: %w", err)
	}
	if c, err := pagecache.OpenCgroup(cg, 0); err == nil {
		if u, err := c.Usage(); err == nil {
			progress(fmt.Sprintf("warm: cgroup at %d MiB", u>>20))
		}
		c.Close()
	}
	if cmd, err = s.db.Command(ctx, s.readRun(cg, false)); err != nil {
		return rdbResult{}, err
	}
	in0, ok0 := memStat(cg, "pgpgin")
	if measured != nil {
		measured()
	}
	if wait, err = rdbStart(cmd, "readrandom", agents); err != nil {
		return rdbResult{}, err
	}
	r, err := wait()
	r.warmOps = wr.Ops
	if in1, ok1 := memStat(cg, "pgpgin"); ok0 && ok1 && err == nil && r.Ops > 0 {
		r.loadsPer1k = float64(in1-in0) / float64(r.Ops) * 1000
	} else {
		r.loadsPer1k = math.NaN()
	}
	return r, err
}

// memStat reads a counter of the cgroup's memory.stat (v1's pgpgin: pages
// charged, i.e. loaded into the page cache or allocated; v2 has none).
func memStat(cg, key string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(cg, "memory.stat"))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			var v int64
			_, err := fmt.Sscan(f[1], &v)
			return v, err == nil
		}
	}
	return 0, false
}

// rdbResult is one db_bench process's measured benchmark and what the
// agents' threads spent while it ran.
type rdbResult struct {
	servers.DBBenchResult
	agentCPU []agentMark // per agent, during the measured benchmark: its thread and its BPF programs
	wall     time.Duration
	// loadsPer1k: pages charged to the cgroup (memory.stat pgpgin, v1)
	// per 1000 reads of the measured benchmark: the misses, as pages.
	loadsPer1k float64
	warmOps    int64 // operations of the warm-up before it
	// workCPU: db_bench's own CPU (user and system: its reads, its direct
	// reclaim at the cgroup's limit, and the agent's BPF programs in its
	// threads) over its whole process.
	workCPU time.Duration
}

// agentPctPer10k is agent i's whole cost during the measured benchmark
// (its thread's CPU and its BPF programs' run time), in % of one core,
// per 10k reads/s of it; agentBPFPctPer10k is the BPF programs' part.
func (r rdbResult) agentPctPer10k(i int) float64 {
	if i >= len(r.agentCPU) {
		return math.NaN()
	}
	return agentPctPer10k(r.agentCPU[i].total(), r.wall, r.OpsPerSec)
}

func (r rdbResult) agentBPFPctPer10k(i int) float64 {
	if i >= len(r.agentCPU) {
		return math.NaN()
	}
	return agentPctPer10k(r.agentCPU[i].bpf, r.wall, r.OpsPerSec)
}

// agentEvictPctPer10k is the part of agent i's thread CPU spent evicting
// (its fadvise calls and their checks).
func (r rdbResult) agentEvictPctPer10k(i int) float64 {
	if i >= len(r.agentCPU) {
		return math.NaN()
	}
	return agentPctPer10k(r.agentCPU[i].evict, r.wall, r.OpsPerSec)
}

// agentPctPer10k is an agent's CPU over a run of wall, in % of one core,
// per 10k operations/s of it.
func agentPctPer10k(cpu, wall time.Duration, opsPerSec float64) float64 {
	if wall <= 0 || opsPerSec <= 0 {
		return math.NaN()
	}
	return cpu.Seconds() / wall.Seconds() * 100 / (opsPerSec / 1e4)
}

// rdbStart starts db_bench (cmd, running benchmark) and returns a wait
// function that parses its result, with what the agents' threads spent
// meanwhile.
func rdbStart(cmd *exec.Cmd, benchmark string, agents []*pagecache.Agent) (wait func() (rdbResult, error), err error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stats, err := bpfStats(agents...)
	if err != nil {
		return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	if err := cmd.Start(); err != nil {
		if stats != nil {
			stats.Close()
		}
		return nil, err
	}
	mark := func() ([]agentMark, time.Time) {
		cpu := make([]agentMark, len(agents))
		for i, a := range agents {
			cpu[i] = markAgent(a)
		}
		return cpu, time.Now()
	}
	cpu0, t0 := mark()
	var all strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
		}
	}()
	return func() (rdbResult, error) {
		<-done
		werr := cmd.Wait()
		cpu1, t1 := mark()
		if stats != nil {
			stats.Close()
		}
		var r rdbResult
		if werr != nil {
			return r, fmt.Errorf("db_bench: %v: %s\n%s", werr, lastLines(stderr.String(), 5), lastLines(all.String(), 10))
		}
		res, err := servers.ParseDBBench(all.String(), benchmark)
		if err != nil {
			return r, err
		}
		r.DBBenchResult = res
		r.wall = t1.Sub(t0)
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.workCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		for i := range agents {
			r.agentCPU = append(r.agentCPU, cpu1[i].since(cpu0[i]))
		}
		return r, nil
	}, nil
}

// lastLines is the last n lines of s without db_bench's progress reports
// ("... finished N ops", rewritten in place with \r: one "line" of
// thousands of reports otherwise).
func lastLines(s string, n int) string {
	var ls []string
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if !strings.HasPrefix(strings.TrimSpace(l), "... finished") {
			ls = append(ls, l)
		}
	}
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// rdbAgent starts an agent over the database in a new cgroup, or (policy
// "") only the cgroup. The returned stop ends the agent's loop; close
// removes everything.
func rdbAgent(ctx context.Context, dir, name string, limit int64, policy string, sample uint32) (a *pagecache.Agent, cg *pagecache.Cgroup, stop func(), err error) {
	if policy == "" {
		cg, err = pagecache.OpenCgroup(name, limit)
		return nil, cg, func() {}, err
	}
	if a, err = pagecache.Start(pagecache.Config{Dir: dir, Cgroup: name, Limit: limit, Policy: policy, AccessSample: sample}); err != nil {
		return nil, nil, nil, err
	}
	return a, a.Cgroup(), runAgent(ctx, a), nil
}

// rdbReads: skewed point reads (readrandom, --read_random_exp_range) under
// the kernel's default and the agent's LFU, S3-FIFO and LHD.
func rdbReads(ctx context.Context, rep *benchkit.Report, opt Options, s *rdbSetup) error {
	policies := map[string]string{"default": "", "traced": "", "agent_lfu": "lfu", "agent_s3fifo": "s3fifo", "agent_lhd": "lhd", "agent_auto": pagecache.AutoPolicy}
	modes := rdbReadModes
	rounds := benchkit.Rounds(opt.Quick)
	rep.SetConfig("rocksdb_reads_rounds", rounds)
	err := benchkit.Interleave(ctx, rounds, modes, func(m string) { opt.Progress("rocksdb reads: " + m) }, func(ctx context.Context, _ int, mode string) error {
		if err := s.rdbDrop(); err != nil {
			return err
		}
		mr, err := startMode(ctx, s.db.Dir, fmt.Sprintf("cistern-bench-rocksdb-%d", os.Getpid()), s.limit, policies[mode], 1, func(p string) { opt.Progress("rocksdb reads: " + mode + ": " + p) })
		if err != nil {
			return err
		}
		a, cg, stop := mr.a, mr.cg, mr.stop
		var tr *tracer
		if mode == "traced" {
			if tr, err = startTrace(ctx, opt.CacheDir, s.db.Dir, cg.Path); err != nil {
				pcClose(a, cg)
				return err
			}
		}
		m := "rocksdb_reads/" + mode
		r, err := func() (rdbResult, error) {
			defer stop()
			// auto's cost over the measured run: where it stands aside in
			// every round it is judged by it (autoTargets).
			var cost autoCostRun
			r, err := s.readWarmMeasured(ctx, cg.Path, []*pagecache.Agent{a}, func(p string) { opt.Progress("rocksdb reads: " + mode + ": " + p) }, func() { cost.start(mr.auto) })
			return r, cost.end(rep, m, err)
		}()
		if tr != nil {
			evs, terr := tr.finish()
			if err == nil && terr == nil && r.Ops > 0 {
				_, terr = sampleHeadroom(rep, m, evs, float64(r.warmOps)/float64(r.warmOps+r.Ops), float64(r.Ops))
			}
			if err == nil {
				err = terr
			}
		}
		if err == nil {
			opt.Progress(fmt.Sprintf("rocksdb reads: %s: %.0f ops/s, P99 %.0f µs", mode, r.OpsPerSec, r.P99))
			rep.Sample(m, "ops_per_sec", r.OpsPerSec)
			rep.Sample(m, "p99_us", r.P99)
			rep.Sample(m, "p50_us", r.P50)
			rep.Sample(m, "page_loads_per_1k_reads", r.loadsPer1k)
			if r.Ops > 0 && r.workCPU > 0 {
				rep.Sample(m, "db_bench_cpu_us_per_read", float64(r.workCPU.Nanoseconds())/1e3/float64(r.Ops))
			}
			if a != nil {
				rep.Sample(m, "agent_thread_us_per_read", float64(r.agentCPU[0].thread.Nanoseconds())/1e3/float64(max(r.Ops, 1)))
				rep.Sample(m, "agent_cpu_pct_per_10k_reads", r.agentPctPer10k(0))
				rep.Sample(m, "agent_bpf_pct_per_10k_reads", r.agentBPFPctPer10k(0))
				rep.Sample(m, "agent_evict_pct_per_10k_reads", r.agentEvictPctPer10k(0))
				pcAgentStats(rep, m, a)
			}
		}
		return mr.finish(rep, m, err)
	})
	if err != nil {
		return err
	}
	best, bestV := "", math.Inf(-1)
	worstCPU := math.Inf(-1)
	var agents []string
	for _, mode := range modes {
		if !strings.HasPrefix(mode, "agent_") || mode == "agent_auto" {
			continue
		}
		agents = append(agents, mode)
		p := strings.TrimPrefix(mode, "agent_")
		v := rep.PairedRatio("rocksdb_reads_speedup_"+p, "rocksdb_reads/"+mode, "ops_per_sec", "rocksdb_reads/default", "ops_per_sec")
		rep.PairedRatio("rocksdb_reads_p99_vs_default_"+p, "rocksdb_reads/"+mode, "p99_us", "rocksdb_reads/default", "p99_us")
		if v > bestV {
			best, bestV = p, v
		}
		if c, _, _, ok := rep.Spread("rocksdb_reads/"+mode, "agent_cpu_pct_per_10k_reads"); ok && c > worstCPU {
			worstCPU = c
		}
		netCost(rep, "rocksdb_reads", mode)
	}
	rep.SetConfig("rocksdb_reads_best_policy", best)
	med, lo, hi, _ := rep.RatioSpread("rocksdb_reads_speedup_" + best)
	rep.TargetSpread("rocksdb_reads_best_speedup", med, lo, hi, ">=", 1.2)
	med, lo, hi, _ = rep.RatioSpread("rocksdb_reads_p99_vs_default_" + best)
	rep.TargetSpread("rocksdb_reads_best_p99_vs_default", med, lo, hi, "<=", 0.8)
	rep.Target("rocksdb_agent_cpu_pct_per_10k_reads", worstCPU, "<=", 3)
	if loads, _, _, ok := rep.Spread("rocksdb_reads/default", "page_loads_per_1k_reads"); ok {
		floorTarget(rep, "rocksdb_reads", "rocksdb_agent_cpu_pct_per_10k_reads", s.evict, loads)
	}
	simBest, gain := headroomVerdicts(rep, "rocksdb_reads", "ops_per_sec", agents)
	rep.SetConfig("rocksdb_reads_sim_gain_pct", gain)
	autoTargets(rep, "rocksdb_reads", "ops_per_sec", false, agents)
	if gain < 15 {
		rep.Note(fmt.Sprintf("rocksdb reads: no headroom: the best policy in simulation (%s) has %.1f %% fewer misses than the kernel model (< 15 %%)", simBest, gain))
	}
	rep.Note(fmt.Sprintf("rocksdb reads: db_bench readrandom, %d threads, --read_random_exp_range=%d (key = num·e^-r, r uniform in [0,%d]: density ∝ 1/key, Zipf-like), "+
		"block cache 8 MiB, pread (--mmap_read=false --use_direct_reads=false), db_bench's default FADV_RANDOM on every table file (advise_random_on_open: no fadvise expresses frequency, so none is compared here); "+
		"each round drops the database's pages, runs a warm-up readrandom (%d threads, %.0f s: fills the cgroup and trains the policy), then the measured one in a new db_bench process (ops/s, P99 from its histogram). "+
		"The agents see every read (the first read of a new folio is not a hit); best policy this run: %s. agent_cpu_pct_per_10k_reads: the agent's whole cost over the measured benchmark, its thread's CPU plus its BPF programs' run time in db_bench's threads (bpf_stats; agent_bpf_pct_per_10k_reads, that part; agent_evict_pct_per_10k_reads, the thread's CPU in evicting: its fadvise calls and their checks), in %% of a core per 10k reads/s; the target is on the largest. db_bench_cpu_us_per_read: db_bench's own CPU per read, the agent's BPF programs and the default's reclaim at the limit in it; rocksdb_reads_net_cpu_us_per_read_POLICY: that and the agent's thread, less the default's db_bench, per read (1 µs a read = 1 %% of a core per 10k reads/s).",
		rdbThreads, rdbExpRange, rdbExpRange, rdbWarmThreads, s.warm.Seconds(), best))
	return nil
}

// netCost reports what an agent costs the machine per read beside the
// default (PART_net_cpu_us_per_read_POLICY; 1 µs a read is 1 % of a core
// per 10k reads/s): db_bench's CPU per read and the agent thread's, less
// db_bench's under the default. The whole cost counts the agent's
// evictions, but under the default db_bench reclaims those pages itself
// at the cgroup's limit; this is the difference the machine sees.
func netCost(rep *benchkit.Report, part, mode string) {
	work, _, _, ok1 := rep.Spread(part+"/"+mode, "db_bench_cpu_us_per_read")
	thread, _, _, ok2 := rep.Spread(part+"/"+mode, "agent_thread_us_per_read")
	def, _, _, ok3 := rep.Spread(part+"/default", "db_bench_cpu_us_per_read")
	if ok1 && ok2 && ok3 {
		rep.Ratio(part+"_net_cpu_us_per_read_"+strings.TrimPrefix(mode, "agent_"), work+thread-def)
	}
}

// fadviseShimC is an LD_PRELOAD library for the scan process of GET-SCAN:
// db_bench cannot advise its own reads, so the shim does what the paper's
// modified scans did: FADV_NOREUSE on each file before its first read, or
// FADV_DONTNEED on what it has read (by 512 KiB stretches behind the
// reader: RocksDB's iterators prefetch with readahead(2) into large folios,
// which a 4 KiB range does not drop).
const fadviseShimC = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define MAXFD (1 << 16)
#define STEP (512 << 10)

static int mode; /* 1 noreuse, 2 dontneed */
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static unsigned char advised[MAXFD];
static off_t lo[MAXFD], hi[MAXFD]; /* dontneed: the stretch read since the last advice */

__attribute__((constructor)) static void shim_init(void)
{
	const char *m = getenv("CISTERN_SCAN_FADVISE");

	if (m && !strcmp(m, "noreuse"))
		mode = 1;
	else if (m && !strcmp(m, "dontneed"))
		mode = 2;
	real_pread = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
}

/* DONTNEED on what was read, by stretches of STEP behind the reader (or
 * the whole stretch when the reader jumps): a 4 KiB range inside a large
 * readahead folio would drop nothing, the kernel drops whole folios only. */
static void dontneed(int fd, off_t off, ssize_t r)
{
	if (fd < 0 || fd >= MAXFD)
		return;
	if (off < hi[fd] - STEP || off > hi[fd] + STEP) {
		if (hi[fd] > lo[fd])
			posix_fadvise(fd, lo[fd], hi[fd] - lo[fd], POSIX_FADV_DONTNEED);
		lo[fd] = off;
	}
	if (off + r > hi[fd] || off < lo[fd])
		hi[fd] = off + r;
	if (off - lo[fd] >= STEP) {
		posix_fadvise(fd, lo[fd], off - lo[fd], POSIX_FADV_DONTNEED);
		lo[fd] = off;
	}
}

static ssize_t shim_pread(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r;

	if (!real_pread)
		shim_init();
	if (mode == 1 && fd >= 0 && fd < MAXFD && !advised[fd]) {
		advised[fd] = 1;
		posix_fadvise(fd, 0, 0, POSIX_FADV_NOREUSE);
	}
	r = real_pread(fd, buf, n, off);
	if (mode == 2 && r > 0)
		dontneed(fd, off, r);
	return r;
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off) { return shim_pread(fd, buf, n, off); }
ssize_t pread(int fd, void *buf, size_t n, off_t off) { return shim_pread(fd, buf, n, off); }
`

// fadviseShim builds the shim once into the cache dir.
func fadviseShim(ctx context.Context, cacheDir string) (string, error) {
	sum := sha256.Sum256([]byte(fadviseShimC))
	so := filepath.Join(cacheDir, "fadvise-shim-"+hex.EncodeToString(sum[:6])+".so")
	if _, err := os.Stat(so); err == nil {
		return so, nil
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		return "", errors.New("gcc not installed (make deps): it builds the scan's fadvise shim")
	}
	src := so + ".c"
	if err := os.WriteFile(src, []byte(fadviseShimC), 0o644); err != nil {
		return "", err
	}
	defer os.Remove(src)
	if out, err := exec.CommandContext(ctx, "gcc", "-O2", "-shared", "-fPIC", "-o", so+".tmp", src, "-ldl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the fadvise shim: %v: %s", err, out)
	}
	return so, os.Rename(so+".tmp", so)
}

// rdbScanNexts is how many entries each of the scan's seeks reads (about
// 50 MB at 1 KiB values).
const rdbScanNexts = 50000

// rdbGetScanSample: GET-SCAN's agent sees every read, as the reads part's.
// One read in 16 (the synthetic part's) left its thread's CPU as it was
// (21-24 % of a core per 10k reads/s against fD's 20-25 %, session 14):
// the cost is its evictions, not the read events.
const rdbGetScanSample = 1

// rdbGetScan: skewed point reads (GETs) in one db_bench process and a scan
// (seekrandom with long --seek_nexts) in a second, read-only on the same
// database in one cgroup: default, fadvise NOREUSE/DONTNEED on the scan's
// reads, and the agent's GET-SCAN with the scan process registered.
func rdbGetScan(ctx context.Context, rep *benchkit.Report, opt Options, s *rdbSetup) error {
	shim, err := fadviseShim(ctx, opt.CacheDir)
	if err != nil {
		return err
	}
	modes := rdbGetScanModes
	rounds := benchkit.Rounds(opt.Quick)
	rep.SetConfig("rocksdb_getscan_rounds", rounds)
	rep.SetConfig("rocksdb_getscan_seek_nexts", rdbScanNexts)
	rep.SetConfig("rocksdb_getscan_access_sample", rdbGetScanSample)
	err = benchkit.Interleave(ctx, rounds, modes, func(m string) { opt.Progress("rocksdb getscan: " + m) }, func(ctx context.Context, _ int, mode string) error {
		if err := s.rdbDrop(); err != nil {
			return err
		}
		policy := map[string]string{"agent_get_scan": "get-scan", "agent_auto": pagecache.AutoPolicy}[mode]
		progress := func(p string) { opt.Progress("rocksdb getscan: " + mode + ": " + p) }
		mr, err := startMode(ctx, s.db.Dir, fmt.Sprintf("cistern-bench-rocksdb-%d", os.Getpid()), s.limit, policy, rdbGetScanSample, progress)
		if err != nil {
			return err
		}
		a, cg, stop := mr.a, mr.cg, mr.stop
		m := "rocksdb_getscan/" + mode
		gets, scan, err := func() (rdbResult, rdbResult, error) {
			defer stop()
			// The scan runs for the GETs' warm-up and measured parts.
			scmd, err := s.db.Command(ctx, servers.DBBenchRun{Benchmark: "seekrandom", Threads: 1, Duration: s.warm + s.measure,
				SeekNexts: rdbScanNexts, Cgroup: cg.Path})
			if err != nil {
				return rdbResult{}, rdbResult{}, err
			}
			if adv := strings.TrimPrefix(mode, "fadvise_"); adv != mode {
				scmd.Env = append(os.Environ(), "LD_PRELOAD="+shim, "CISTERN_SCAN_FADVISE="+adv)
			}
			swait, err := rdbStart(scmd, "seekrandom", nil)
			if err != nil {
				return rdbResult{}, rdbResult{}, err
			}
			if a != nil { // the shell execs db_bench in place: same pid, its threads' tgid
				if err := a.AddScanPID(scmd.Process.Pid); err != nil {
					scmd.Process.Kill()
					swait()
					return rdbResult{}, rdbResult{}, err
				}
			}
			// auto's cost over the measured GETs: where it stands aside
			// in every round it is judged by it (autoTargets).
			var cost autoCostRun
			g, gerr := s.readWarmMeasured(ctx, cg.Path, []*pagecache.Agent{a}, progress, func() { cost.start(mr.auto) })
			gerr = cost.end(rep, m, gerr)
			if gerr != nil {
				scmd.Process.Kill()
			}
			sr, serr := swait()
			return g, sr, errors.Join(gerr, serr)
		}()
		if err == nil {
			progress(fmt.Sprintf("GETs %.0f ops/s (P99 %.0f µs), scan %.1f MB/s", gets.OpsPerSec, gets.P99, scan.MBPerSec))
			rep.Sample(m, "get_ops_per_sec", gets.OpsPerSec)
			rep.Sample(m, "get_p99_us", gets.P99)
			rep.Sample(m, "scan_mb_per_sec", scan.MBPerSec)
			if a != nil {
				rep.Sample(m, "agent_cpu_pct_per_10k_reads", gets.agentPctPer10k(0))
				pcAgentStats(rep, m, a)
			}
		}
		return mr.finish(rep, m, err)
	})
	if err != nil {
		return err
	}
	rep.PairedRatio("rocksdb_get_speedup", "rocksdb_getscan/agent_get_scan", "get_ops_per_sec", "rocksdb_getscan/default", "get_ops_per_sec")
	rep.PairedRatio("rocksdb_get_p99_vs_default", "rocksdb_getscan/agent_get_scan", "get_p99_us", "rocksdb_getscan/default", "get_p99_us")
	rep.PairedRatio("rocksdb_scan_vs_default", "rocksdb_getscan/agent_get_scan", "scan_mb_per_sec", "rocksdb_getscan/default", "scan_mb_per_sec")
	for _, f := range []string{"noreuse", "dontneed"} {
		rep.PairedRatio("rocksdb_get_speedup_fadvise_"+f, "rocksdb_getscan/fadvise_"+f, "get_ops_per_sec", "rocksdb_getscan/default", "get_ops_per_sec")
	}
	rep.TargetRatio("rocksdb_get_speedup", ">=", 1.5)
	rep.TargetRatio("rocksdb_scan_vs_default", ">=", 0.8)
	// auto on the GETs, the part's measure (rocksdb_get_speedup's); the
	// scan's ratio beside it, without a target.
	autoTargets(rep, "rocksdb_getscan", "get_ops_per_sec", false, []string{"agent_get_scan"})
	rep.PairedRatio("rocksdb_getscan_auto_scan_vs_default", "rocksdb_getscan/agent_auto", "scan_mb_per_sec", "rocksdb_getscan/default", "scan_mb_per_sec")
	rep.Note(fmt.Sprintf("rocksdb getscan: GETs = db_bench readrandom (%d threads, --read_random_exp_range=%d, warm-up then measured, as in reads); "+
		"scan = a second db_bench process, --readonly seekrandom --seek_nexts=%d, one thread, for the GETs' whole run, registered with GET-SCAN by pid (its threads by tgid); the agent sees one read in %d (1: every read); "+
		"fadvise_*: the scan process runs with an LD_PRELOAD shim that advises its own reads (NOREUSE on each file before its first read, or DONTNEED on what it has read, by 512 KiB stretches behind the reader): db_bench has no such option. "+
		"scan_mb_per_sec: db_bench's MB/s of keys and values the scan read.", rdbThreads, rdbExpRange, rdbScanNexts, rdbGetScanSample))
	return nil
}

// rdbCgroupMeasure: the per-cgroup part measures RocksDB 3× as long as the
// reads part (30 s full), so that a round holds several repeat searches
// beside it, not one (a round's search figure was one 4-9 s search until
// fD, whose rounds of the same configuration then ranged 0.86-1.13).
const rdbCgroupMeasure = 3

// rdbParityMargin: "at least as good as under a global policy" allows the
// tailored pair to be this much lower. Under tailored and under the global
// policy that matches a workload's own (RocksDB's LFU, the search's MRU),
// that workload runs the same agent and policy; only the neighbour
// differs, so the true ratio is 1 and a bare >= 1 is a coin flip between
// runs. The margin states what counts as equal.
const rdbParityMargin = 0.05

// rdbPerCgroup: RocksDB's skewed reads in one cgroup and the ripgrep
// searches in another, at once: both on the default, one global policy for
// both (LFU, MRU), and each its own (tailored: LFU for RocksDB, MRU for the
// search).
func rdbPerCgroup(ctx context.Context, rep *benchkit.Report, opt Options, s *rdbSetup) error {
	if _, err := exec.LookPath("rg"); err != nil {
		return fmt.Errorf("ripgrep (rg) not installed: make deps")
	}
	tree, err := linuxTree(ctx, opt)
	if err != nil {
		return err
	}
	root := tree
	if opt.Quick {
		root = filepath.Join(tree, "drivers", "net")
	}
	files, bytes, err := pcFiles(root)
	if err != nil {
		return err
	}
	slimit := bytes * 7 / 10
	rep.SetConfig("percgroup_search_tree", root)
	rep.SetConfig("percgroup_search_cgroup_limit_bytes", slimit)
	configs := map[string][2]string{ // rocksdb's policy, the search's
		"default": {"", ""}, "default_after": {"", ""}, "global_lfu": {"lfu", "lfu"}, "global_mru": {"mru", "mru"}, "tailored": {"lfu", "mru"},
		"agent_auto": {pagecache.AutoPolicy, pagecache.AutoPolicy}, // an auto in each cgroup
	}
	modes := rdbCgroupModes
	rounds := benchkit.Rounds(opt.Quick)
	rep.SetConfig("percgroup_rounds", rounds)
	ps := *s
	ps.measure = rdbCgroupMeasure * s.measure
	rep.SetConfig("percgroup_measure_seconds", ps.measure.Seconds())
	rep.SetConfig("percgroup_parity_margin", rdbParityMargin)
	err = benchkit.Interleave(ctx, rounds, modes, func(m string) { opt.Progress("rocksdb percgroup: " + m) }, func(ctx context.Context, _ int, mode string) error {
		if err := s.rdbDrop(); err != nil {
			return err
		}
		if err := pcDrop(files); err != nil {
			return err
		}
		pol := configs[mode]
		rp := func(p string) { opt.Progress("rocksdb percgroup: " + mode + ": rocksdb: " + p) }
		// Each auto in a process of its own (autochild.go), as a user runs
		// one per cgroup: each one's cost is then its own.
		rm, err := startModeOwnProcess(ctx, s.db.Dir, fmt.Sprintf("cistern-bench-rocksdb-%d", os.Getpid()), s.limit, pol[0], 1, rp)
		if err != nil {
			return err
		}
		rm.key = "rocksdb_"
		ra, rcg, rstop := rm.a, rm.cg, rm.stop
		// The search's agent reports one read in 16, as the search part's.
		sp := func(p string) { opt.Progress("rocksdb percgroup: " + mode + ": search: " + p) }
		sm, err := startModeOwnProcess(ctx, root, fmt.Sprintf("cistern-bench-search-%d", os.Getpid()), slimit, pol[1], 16, sp)
		if err != nil {
			rstop()
			rm.close()
			return err
		}
		sm.key = "search_"
		scg, sstop := sm.cg, sm.stop
		m := "percgroup/" + mode
		r, searches, err := func() (rdbResult, []float64, error) {
			defer rstop()
			defer sstop()
			// Searches one after the other while db_bench runs.
			var mu sync.Mutex
			var each []float64
			sctx, cancel := context.WithCancel(ctx)
			sdone := make(chan error, 1)
			go func() {
				for i := 0; sctx.Err() == nil; i++ {
					t0 := time.Now()
					c := exec.CommandContext(sctx, "sh", "-c", `echo $$ > "$0/cgroup.procs" && exec rg -c -j2 --no-ignore --hidden --no-messages "$1" "$2" > /dev/null`,
						scg.Path, searchPatterns[i%len(searchPatterns)], root)
					if err := c.Run(); err != nil {
						var ee *exec.ExitError
						if sctx.Err() != nil {
							break // stopped with db_bench: not counted
						}
						if !errors.As(err, &ee) || ee.ExitCode() != 1 {
							sdone <- fmt.Errorf("search %d: %w", i, err)
							return
						}
					}
					mu.Lock()
					each = append(each, time.Since(t0).Seconds())
					mu.Unlock()
				}
				sdone <- nil
			}()
			// Each auto's cost over RocksDB's measured run (the searches
			// run through it), each in its own process.
			var cost childCostRun
			r, err := ps.readWarmMeasured(ctx, rcg.Path, []*pagecache.Agent{ra}, func(p string) { opt.Progress("rocksdb percgroup: " + mode + ": " + p) }, func() {
				cost.start(map[string]*autoChild{rm.key: rm.child, sm.key: sm.child})
			})
			err = cost.end(rep, m, err)
			// At least two searches (the first reads the tree from disk):
			// on a loaded machine they may need longer than db_bench ran.
			for deadline := time.Now().Add(2 * time.Minute); err == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				mu.Lock()
				n := len(each)
				mu.Unlock()
				if n >= 2 {
					break
				}
			}
			cancel()
			serr := <-sdone
			mu.Lock()
			defer mu.Unlock()
			return r, each, errors.Join(err, serr)
		}()
		if err == nil {
			if len(searches) < 2 {
				err = fmt.Errorf("only %d searches finished beside db_bench", len(searches))
			} else {
				med := benchkit.Median(searches[1:])
				opt.Progress(fmt.Sprintf("rocksdb percgroup: %s: rocksdb %.0f ops/s (P99 %.0f µs), %d searches, median repeat %.2f s", mode, r.OpsPerSec, r.P99, len(searches), med))
				rep.Sample(m, "rocksdb_ops_per_sec", r.OpsPerSec)
				rep.Sample(m, "rocksdb_p99_us", r.P99)
				rep.Sample(m, "rocksdb_page_loads_per_1k_reads", r.loadsPer1k)
				rep.Sample(m, "search_seconds", med)
				rep.Sample(m, "searches", float64(len(searches)))
			}
		}
		serr := sm.finish(rep, m, err)
		if rerr := rm.finish(rep, m, err); err == nil {
			err = errors.Join(serr, rerr)
		}
		return err
	})
	if err != nil {
		return err
	}
	fixed := []string{"global_lfu", "global_mru", "tailored"}
	for _, mode := range fixed {
		rep.PairedRatio("percgroup_rocksdb_"+mode+"_vs_default", "percgroup/"+mode, "rocksdb_ops_per_sec", "percgroup/default", "rocksdb_ops_per_sec")
		// Searches: time, so default over mode is the speedup.
		rep.PairedRatio("percgroup_search_"+mode+"_vs_default", "percgroup/default", "search_seconds", "percgroup/"+mode, "search_seconds")
	}
	rep.TargetRatio("percgroup_rocksdb_tailored_vs_default", ">=", 1.2)
	rep.TargetRatio("percgroup_search_tailored_vs_default", ">=", 1.2)
	for _, g := range []string{"global_lfu", "global_mru"} {
		rep.PairedRatio("percgroup_rocksdb_tailored_vs_"+g, "percgroup/tailored", "rocksdb_ops_per_sec", "percgroup/"+g, "rocksdb_ops_per_sec")
		rep.PairedRatio("percgroup_search_tailored_vs_"+g, "percgroup/"+g, "search_seconds", "percgroup/tailored", "search_seconds")
		rep.TargetRatio("percgroup_rocksdb_tailored_vs_"+g, ">=", 1-rdbParityMargin)
		rep.TargetRatio("percgroup_search_tailored_vs_"+g, ">=", 1-rdbParityMargin)
	}
	// auto in each cgroup, judged on each workload's measure against the
	// defaults around it and the best fixed configuration for that
	// workload (one global policy or the tailored pair).
	autoTargetsOn(rep, "percgroup_rocksdb", "percgroup", "rocksdb_", "rocksdb_ops_per_sec", false, fixed)
	autoTargetsOn(rep, "percgroup_search", "percgroup", "search_", "search_seconds", true, fixed)
	rep.Note("percgroup: db_bench readrandom (as in reads, its cgroup 1/4 of the database) and ripgrep searches one after another in a second cgroup (70% of the tree), at once; " +
		"search_seconds = median of the searches after the first that finished while db_bench ran (both start cold; when fewer than two had finished, the search goes on alone until two have); each agent runs on its own cgroup and directory only. " +
		"The RocksDB agent sees every read; the search's reports one in 16. " +
		fmt.Sprintf("RocksDB is measured %v here (%d× the reads part) so that a round holds several repeat searches. ", ps.measure, rdbCgroupMeasure) +
		fmt.Sprintf("tailored vs global_*: \"at least as good\" is within %.0f %% (>= %.2f): under tailored and under the global policy matching a workload's own, that workload runs the same policy, so the true ratio is 1.", rdbParityMargin*100, 1-rdbParityMargin))
	return nil
}

// pagecacheRocksDB runs the rocksdb workload's parts.
func pagecacheRocksDB(ctx context.Context, rep *benchkit.Report, opt Options) error {
	s, err := rdbPrepare(ctx, rep, opt)
	if err != nil {
		return err
	}
	for _, p := range opt.Parts {
		switch p {
		case "reads":
			err = rdbReads(ctx, rep, opt, s)
		case "getscan":
			err = rdbGetScan(ctx, rep, opt, s)
		case "percgroup":
			err = rdbPerCgroup(ctx, rep, opt, s)
		default:
			err = fmt.Errorf("unknown part %q for --workload rocksdb (have reads, getscan, percgroup)", p)
		}
		if err != nil {
			return err
		}
	}
	rep.Section("rocksdb reads: db_bench readrandom, skewed", rows("rocksdb_reads", rdbReadModes),
		[]string{"ops_per_sec", "p99_us", "page_loads_per_1k_reads", "agent_cpu_pct_per_10k_reads", "agent_bpf_pct_per_10k_reads", "agent_evict_pct_per_10k_reads", "db_bench_cpu_us_per_read"})
	rep.Section("rocksdb reads headroom: the traced run replayed, pages loaded per 1000 reads", []string{"rocksdb_reads/traced"},
		[]string{"trace_page_loads_per_1k_reads", "sim_kernel_loads_per_1k_reads", "sim_opt_loads_per_1k_reads", "sim_oracle_lfu_loads_per_1k_reads", "sim_history_lfu_loads_per_1k_reads", "sim_wtinylfu_loads_per_1k_reads", "sim_s3fifo_loads_per_1k_reads", "sim_lfu_loads_per_1k_reads"})
	rep.Section("rocksdb get-scan: readrandom GETs beside a seekrandom scan", rows("rocksdb_getscan", rdbGetScanModes),
		[]string{"get_ops_per_sec", "get_p99_us", "scan_mb_per_sec", "agent_cpu_pct_per_10k_reads"})
	rep.Section("per-cgroup: rocksdb beside ripgrep", rows("percgroup", rdbCgroupModes),
		[]string{"rocksdb_ops_per_sec", "rocksdb_p99_us", "search_seconds", "searches"})
	if opt.PlotPath != "" {
		return rdbPlot(rep, opt.PlotPath)
	}
	return nil
}

// rdbPlot draws each mode against its part's default (higher is better):
// one group per part and measure, one series per policy.
func rdbPlot(rep *benchkit.Report, path string) error {
	groups := []barGroup{
		{"reads\nops/s", "rocksdb_reads", "ops_per_sec", false},
		{"GET-SCAN\nGETs", "rocksdb_getscan", "get_ops_per_sec", false},
		{"GET-SCAN\nscan", "rocksdb_getscan", "scan_mb_per_sec", false},
		{"per-cgroup\nRocksDB", "percgroup", "rocksdb_ops_per_sec", false},
		{"per-cgroup\nsearch", "percgroup", "search_seconds", true},
	}
	kinds := []barKind{
		{"LFU", "agent_lfu"}, {"S3-FIFO", "agent_s3fifo"}, {"LHD", "agent_lhd"},
		{"GET-SCAN", "agent_get_scan"}, {"scan NOREUSE", "fadvise_noreuse"}, {"scan DONTNEED", "fadvise_dontneed"},
		{"tailored (LFU+MRU)", "tailored"}, {"LFU both", "global_lfu"}, {"MRU both", "global_mru"},
		{"default, traced", "traced"}, {"auto", "agent_auto"},
	}
	return relativeBars(rep, path, "RocksDB (db_bench) under page-cache policies ("+rep.Kernel()+")", groups, kinds)
}
