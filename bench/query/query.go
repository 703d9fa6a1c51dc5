package querybench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/bench/queryref"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/plot"
)

// Options configure the query benchmark.
type Options struct {
	Quick    bool
	Runtime  time.Duration // fio runtime per run (default 3s; quick 1s)
	Rounds   int           // interleaved rounds, medians quoted (default 5; quick 3)
	Modes    []string      // traced modes, a subset of Modes
	Queries  []string      // subset of q1, q2
	Dir      string        // for the fio file and Q2 output (default /var/tmp)
	Workload string        // "fio" (default) or "rocksdb" (db_bench readrandom)
	CacheDir string        // rocksdb: where the database is kept (default /var/cache/cistern/pagecache/rocksdb)
	PlotPath string
	Progress func(step string)
}

// Modes are the traced modes, in order; untraced always runs.
// bpftrace runs last in each round: it is by far the heaviest, and the
// two modes the targets compare should not run in its wake.
var Modes = []string{"hand_written", "optimizer", "mvsf_only", "bpftrace"}

func (o *Options) defaults() {
	if o.Runtime == 0 && o.Workload == "rocksdb" {
		// db_bench opens the database first (a few hundred ms of its CPU):
		// longer runs keep that a small part of the measure.
		o.Runtime = 5 * time.Second
		if o.Quick {
			o.Runtime = 2 * time.Second
		}
	}
	if o.Runtime == 0 {
		o.Runtime = 3 * time.Second
		if o.Quick {
			o.Runtime = time.Second
		}
	}
	if o.Rounds == 0 {
		// Many short pairs rather than a few long ones: the shared
		// machine's load changes within seconds, medians absorb it.
		o.Rounds = benchkit.Rounds(o.Quick)
	}
	if len(o.Modes) == 0 {
		o.Modes = Modes
	}
	if len(o.Queries) == 0 {
		o.Queries = []string{"q1", "q2"}
	}
	if o.Dir == "" {
		o.Dir = "/var/tmp"
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Workload == "" {
		o.Workload = "fio"
	}
	if o.CacheDir == "" {
		o.CacheDir = "/var/cache/cistern/pagecache/rocksdb"
	}
}

func (o *Options) check() error {
	for _, m := range o.Modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("unknown mode %q (want some of hand_written, bpftrace, optimizer, mvsf_only)", m)
		}
	}
	for _, q := range o.Queries {
		if q != "q1" && q != "q2" {
			return fmt.Errorf("unknown query %q (want q1, q2)", q)
		}
	}
	if o.Workload != "fio" && o.Workload != "rocksdb" {
		return fmt.Errorf("unknown workload %q (want fio, rocksdb)", o.Workload)
	}
	if o.Runtime < time.Second || o.Rounds < 1 {
		return errors.New("runtime must be at least 1s and rounds at least 1")
	}
	return nil
}

// CheckOptions validates options before any root work is done.
func CheckOptions(o Options) error { o.defaults(); return o.check() }

// queryAcc accumulates one mode and query over the rounds.
type queryAcc struct {
	iops, perCPU, wallDrop, cpuDrop   []float64
	events, lost, preads, workloadIOs uint64
	plan                              string // the optimizer's choice (last round)
}

// Run runs the query benchmark and returns its report.
func Run(ctx context.Context, opt Options) (*benchkit.Report, error) {
	opt.defaults()
	if err := opt.check(); err != nil {
		return nil, err
	}
	rep := benchkit.New("query", opt.Quick)
	if opt.Workload == "rocksdb" {
		rep.SetConfig("workload", "rocksdb: db_bench readrandom, 1 thread, uniform keys, 1 GiB database in the page cache, block cache 8 MiB, pread")
	} else {
		rep.SetConfig("workload", "fio randread 4 KiB, ioengine=psync, 64 MiB file in the page cache, 1 job")
	}
	rep.SetConfig("fio_seconds_per_run", opt.Runtime.Seconds())
	rep.SetConfig("rounds", opt.Rounds)
	rep.SetConfig("filter", "every mode traces the workload's cgroup v2 only (cgroup_id = fio's)")
	rep.SetConfig("q1", strings.Replace(sqlQ1, "%d", "<fio cgroup>", 1))
	rep.SetConfig("q2", strings.Replace(sqlQ2, "%d", "<fio cgroup>", 1)+" (--out FILE, csv)")

	cg, err := queryref.NewCgroup(fmt.Sprintf("cistern-bench-query-%d", os.Getpid()))
	if err != nil {
		return nil, err
	}
	defer cg.Remove()
	dir, err := os.MkdirTemp(opt.Dir, "cistern-bench-query-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var ld load
	if opt.Workload == "rocksdb" {
		if ld.db, err = prepareRocksDB(ctx, opt.CacheDir, opt.Progress); err != nil {
			return nil, err
		}
	} else {
		ld.file = filepath.Join(dir, "fio.dat")
		opt.Progress("fio file (64 MiB, read once into the page cache)")
		if err := prepareFioFile(ld.file); err != nil {
			return nil, err
		}
	}

	// Each round runs, per query, one untraced fio run and then every
	// traced mode back to back, so that the modes compared with each other
	// (optimizer against hand_written above all) run next to each other
	// against one baseline, and the target is judged on the median of the
	// per-round differences rather than on two medians taken apart.
	acc := map[string]*queryAcc{}
	skipped := map[string]string{}
	var steps []string
	for _, q := range opt.Queries {
		steps = append(steps, "untraced "+q)
		for _, mode := range opt.Modes {
			steps = append(steps, mode+" "+q)
		}
	}
	// The targets compare the plans' kernel cost: the run time of the BPF
	// programs (bpf_stats) during the traced fio run, over fio's own CPU
	// time, where they run. The probe effect, a difference of two fio
	// runs' read rates, moved the per-round optimizer - hand_written
	// difference from -9 to +5 points in a quiet quick run; it stays in
	// the table and the JSON.
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	costOK := err == nil
	if costOK {
		defer stats.Close()
	} else {
		rep.Note(fmt.Sprintf("BPF run-time statistics unavailable (%v): the targets use the probe effect instead", err))
	}
	var ur fioResult
	pe := map[string]float64{}      // this round's probe effect per "mode q"
	kcost := map[string]float64{}   // this round's kernel cost per "mode q"
	perRead := map[string]float64{} // this round's BPF ns per workload read per "mode q"
	err = benchkit.Interleave(ctx, opt.Rounds, steps, opt.Progress, func(ctx context.Context, round int, step string) error {
		mode, q, _ := strings.Cut(step, " ")
		// ABBA: every other round swaps the two modes the target compares,
		// so that neither always runs in the other's wake.
		if round%2 == 1 && slices.Contains(opt.Modes, "hand_written") && slices.Contains(opt.Modes, "optimizer") {
			switch mode {
			case "hand_written":
				mode = "optimizer"
			case "optimizer":
				mode = "hand_written"
			}
			step = mode + " " + q
		}
		if mode == "untraced" {
			f, err := ld.start(ctx, cg, opt.Runtime)
			if err != nil {
				return err
			}
			if ur, err = f.wait(); err != nil {
				return err
			}
			rep.Sample("untraced", "iops", ur.iops)
			rep.Sample("untraced", "reads_per_cpu_s", ur.perCPU())
			clear(pe)
			clear(kcost)
			clear(perRead)
			return nil
		}
		if _, ok := skipped[mode]; ok {
			return nil
		}
		r, fr, err := tracedRun(ctx, mode, q, cg, ld, filepath.Join(dir, mode+"-"+q+".csv"), opt.Runtime)
		var skip errSkip
		if errors.As(err, &skip) {
			skipped[mode] = skip.why
			return nil
		}
		if err != nil {
			return err
		}
		a := acc[step]
		if a == nil {
			a = &queryAcc{}
			acc[step] = a
		}
		p := drop(ur.perCPU(), fr.perCPU())
		pe[step] = p
		rep.Sample(step, "probe_effect_pct", p)
		if costOK && fr.cpuSec > 0 {
			kc := r.bpfTime.Seconds() / fr.cpuSec * 100
			kcost[step] = kc
			rep.Sample(step, "kernel_cost_pct", kc)
			perRead[step] = float64(r.bpfTime.Nanoseconds()) / max(float64(fr.totalIOs), 1)
			rep.Sample(step, "bpf_ns_per_read", perRead[step])
		}
		rep.Sample(step, "probe_effect_wall_pct", drop(ur.iops, fr.iops))
		rep.Sample(step, "iops", fr.iops)
		rep.Sample(step, "reads_per_cpu_s", fr.perCPU())
		a.events += r.events
		a.lost += r.lost
		a.preads += r.preads
		a.workloadIOs += fr.totalIOs
		if r.plan != "" {
			a.plan = r.plan
		}
		o, okO := pe["optimizer "+q]
		h, okH := pe["hand_written "+q]
		if okO && okH && (mode == "optimizer" || mode == "hand_written") {
			rep.SampleRatio(q+"_optimizer_minus_hand_written_probe_effect_pct_points", o-h)
		}
		o, okO = kcost["optimizer "+q]
		h, okH = kcost["hand_written "+q]
		if okO && okH && (mode == "optimizer" || mode == "hand_written") {
			rep.SampleRatio(q+"_optimizer_minus_hand_written_pct_points", o-h)
		}
		o, okO = perRead["optimizer "+q]
		h, okH = perRead["hand_written "+q]
		if okO && okH && h > 0 && (mode == "optimizer" || mode == "hand_written") {
			rep.SampleRatio(q+"_optimizer_vs_hand_written_bpf_ns_per_read", o/h)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	// Q1 agreement: each mode side by side with the reference, same syscalls.
	agree := map[string]agreement{}
	if slices.Contains(opt.Queries, "q1") {
		for _, mode := range opt.Modes {
			if _, ok := skipped[mode]; ok || mode == "hand_written" {
				continue
			}
			opt.Progress("Q1 agreement: " + mode + " beside hand_written")
			a, err := agreeRun(ctx, mode, cg, ld, dir, opt.Runtime)
			if err != nil {
				return nil, fmt.Errorf("%s q1 agreement: %w", mode, err)
			}
			agree[mode] = a
			if !a.agree {
				rep.Note(fmt.Sprintf("%s q1 disagreements (%d of %d keys; lost events in that run %d): %s",
					mode, a.keys-a.agreeing, a.keys, a.lost, strings.Join(a.diffs, "; ")))
			}
		}
	}

	for _, mode := range opt.Modes {
		for _, q := range opt.Queries {
			a := acc[mode+" "+q]
			if a == nil {
				continue
			}
			row := mode + " " + q
			rep.Set(row, "events", a.events)
			rep.Set(row, "lost_events", a.lost)
			if a.plan != "" {
				rep.Set(row, "plan", a.plan)
			}
			if q == "q2" {
				rep.Set(row, "workload_syscalls", a.workloadIOs)
				rep.Set(row, "events_pread64", a.preads)
			}
			if ag, ok := agree[mode]; ok && q == "q1" {
				rep.Set(row, "max_latency_agree", ag.agree)
				rep.Set(row, "max_latency_keys", ag.keys)
				rep.Set(row, "max_latency_keys_agreeing", ag.agreeing)
				rep.Set(row, "max_latency_worst_diff_us", ag.worstUs)
			}
		}
	}
	rep.Headline("kernel_cost_pct", "probe_effect_pct", "reads_per_cpu_s", "lost_events")

	queryTargets(rep, opt, acc, agree)
	for _, mode := range opt.Modes {
		if why, ok := skipped[mode]; ok {
			rep.Note(mode + " skipped: " + why)
		}
	}
	rep.Note("kernel_cost_pct: the run time of the mode's BPF programs (those loaded while it started; bpf_stats, enabled for the whole bench, so every mode pays the statistics' two clock reads per program run) during the traced fio run, over fio's CPU time in that run; " +
		"the q1/q2 optimizer_minus_hand_written targets are medians of its per-round differences (the probe effect's are in the JSON as *_probe_effect_pct_points)")
	rep.Note("probe_effect_pct: drop of fio's reads per CPU second (its user+system time, where the BPF programs run) against the untraced run just before; " +
		"probe_effect_wall_pct: the plain IOPS drop, which the shared machine's load moves by tens of percent; medians over the rounds. events and lost_events are summed over the rounds")
	if opt.Workload == "rocksdb" {
		rep.Note("rocksdb: the workload is db_bench readrandom (1 thread, uniform keys, --cache_size=8 MiB, pread, the 1 GiB database in the page cache); " +
			"the paper's probe effect (the drop of the application's throughput) is probe_effect_wall_pct here, the drop of db_bench's ops/s; probe_effect_pct is the drop of its Gets per CPU second. " +
			"Q2 workload check: workload_syscalls is db_bench's own read syscalls (syscr of /proc/PID/io when the exited process is not yet reaped, minus its syscr when execve returned: the kernel's reads of the ELF headers count there), events_pread64 the Q2 file's rows of read, pread64, readv, preadv and preadv2 from db_bench's pid")
	}
	rep.Note("Q2 workload check: workload_syscalls is fio's own read count (total_ios, one pread64 each with psync); events_pread64 counts the Q2 file's pread64 rows from fio's job process")
	rep.Note(fmt.Sprintf("max_latency_agree: the mode and hand_written run together on one fio run; every (pid, syscall) key must be in both and its maximum over the windows must differ by at most %v or %.0f%%", agreeAbs, agreeRel*100))
	if opt.PlotPath != "" {
		var s []plot.BarSeries
		for _, mode := range opt.Modes {
			bs := plot.BarSeries{Name: mode}
			ok := false
			for _, q := range opt.Queries {
				med, lo, hi, has := rep.Spread(mode+" "+q, "probe_effect_pct")
				if !has {
					med, lo, hi = 0, 0, 0
				}
				ok = ok || has
				bs.Values, bs.Lo, bs.Hi = append(bs.Values, med), append(bs.Lo, lo), append(bs.Hi, hi)
			}
			if ok {
				s = append(s, bs)
			}
		}
		var groups []string
		for _, q := range opt.Queries {
			groups = append(groups, map[string]string{"q1": "Q1: max latency per window", "q2": "Q2: every syscall to a file"}[q])
		}
		app, unit := "fio randread", "fio reads"
		if opt.Workload == "rocksdb" {
			app, unit = "RocksDB db_bench readrandom", "db_bench Gets"
		}
		if err := plot.BarChart(opt.PlotPath, "Query: probe effect on "+app+" ("+rep.Kernel()+")",
			"probe effect (% drop of "+unit+" per CPU second)", groups, s); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// drop is the percentage by which got falls short of base.
func drop(base, got float64) float64 {
	if base <= 0 {
		return 0
	}
	return (base - got) / base * 100
}

// tracedOne is one traced run's counts.
type tracedOne struct {
	events, lost, preads uint64
	plan                 string
	bpfTime              time.Duration // the mode's BPF programs' run time during the fio run
}

// tracedRun attaches mode for q, runs fio, and collects what the mode saw.
func tracedRun(ctx context.Context, mode, q string, cg *queryref.Cgroup, ld load, out string, runtime time.Duration) (tracedOne, fioResult, error) {
	defer os.Remove(out)
	// The programs the mode loads are those that appear while it starts:
	// only they are counted. Every program on the machine was counted
	// until 2026-11-27; with db_bench's ~60k syscalls a second (fio's:
	// ~1M), other sessions' programs made most of it (medians over 100 %).
	pre, perr := benchkit.BPFRunTimes()
	stop, err := startMode(ctx, mode, q, cg, out)
	if err != nil {
		return tracedOne{}, fioResult{}, err
	}
	t0, terr := benchkit.BPFRunTimes()
	if perr == nil && terr == nil {
		for id := range pre {
			delete(t0, id)
		}
	}
	f, err := ld.start(ctx, cg, runtime)
	if err != nil {
		stop()
		return tracedOne{}, fioResult{}, err
	}
	fr, ferr := f.wait()
	bt, terr1 := benchkit.BPFRunTimeOf(t0)
	r, err := stop()
	if ferr != nil {
		return tracedOne{}, fr, ferr
	}
	if err != nil {
		return tracedOne{}, fr, err
	}
	one := tracedOne{events: r.events, lost: r.lost, plan: r.plan}
	if perr == nil && terr == nil && terr1 == nil {
		one.bpfTime = bt
	}
	if q == "q2" {
		// Every mode's events are the rows it wrote.
		if one.events, one.preads, err = q2Count(out, fr.mainPID, fr.onlyPID); err != nil {
			return one, fr, err
		}
	}
	return one, fr, nil
}

// Agreement tolerance: both tracers time the same syscall, but each reads
// the clock in its own program on the tracepoint, and an interrupt or (on a
// loaded machine) a preemption can fall between the two reads. Measured:
// 2-12 µs usually, up to 48 µs at a load average of 11 on 2 cores.
const (
	agreeAbs = 100 * time.Microsecond
	agreeRel = 0.02
)

type agreement struct {
	agree          bool
	keys, agreeing int
	worstUs        float64
	lost           uint64   // the mode's lost events in the agreement run
	diffs          []string // the first few disagreeing keys
}

func agreeRun(ctx context.Context, mode string, cg *queryref.Cgroup, ld load, dir string, runtime time.Duration) (agreement, error) {
	ref, err := startHand("q1", cg, "")
	if err != nil {
		return agreement{}, err
	}
	stop, err := startMode(ctx, mode, "q1", cg, filepath.Join(dir, "agree"))
	if err != nil {
		ref()
		return agreement{}, err
	}
	f, err := ld.start(ctx, cg, runtime)
	if err != nil {
		stop()
		ref()
		return agreement{}, err
	}
	_, ferr := f.wait()
	got, gerr := stop()
	want, rerr := ref()
	if err := errors.Join(ferr, gerr, rerr); err != nil {
		return agreement{}, err
	}
	a := compareMaxima(want.maxima, got.maxima)
	a.lost = got.lost
	return a, nil
}

func (a *agreement) diff(s string) { a.diffs = append(a.diffs, s) }

// compareMaxima checks got's per-key maxima against the reference's.
func compareMaxima(ref, got map[maxKey]uint64) agreement {
	a := agreement{}
	seen := map[maxKey]bool{}
	for k, w := range ref {
		seen[k] = true
		a.keys++
		g, ok := got[k]
		if !ok {
			a.diff(fmt.Sprintf("pid %d %s: missing (reference %v)", k.pid, k.syscall, time.Duration(w)))
			continue
		}
		d := float64(max(g, w) - min(g, w))
		a.worstUs = max(a.worstUs, d/1e3)
		if d <= max(float64(agreeAbs), agreeRel*float64(w)) {
			a.agreeing++
		} else {
			a.diff(fmt.Sprintf("pid %d %s: %v, reference %v", k.pid, k.syscall, time.Duration(g), time.Duration(w)))
		}
	}
	for k, g := range got {
		if !seen[k] {
			a.keys++ // a key the reference never saw
			a.diff(fmt.Sprintf("pid %d %s: %v, not in the reference", k.pid, k.syscall, time.Duration(g)))
		}
	}
	slices.Sort(a.diffs)
	if len(a.diffs) > 5 {
		a.diffs = append(a.diffs[:5], "…")
	}
	a.agree = a.keys > 0 && a.agreeing == a.keys
	return a
}

// maxPlanCostRatio bounds the optimizer's Q1 BPF run time per read against
// the hand-written program's. The points target it replaced (+2 of fio's
// CPU) was about 13 % of the reference's run time per read when it was set
// (150 ns per read against fio's 1 µs); the optimizer's own events cost
// about 16 % more than the reference's, measured (docs/query-bench.md).
const maxPlanCostRatio = 1.2

func queryTargets(rep *benchkit.Report, opt Options, acc map[string]*queryAcc, agree map[string]agreement) {
	// Judged on the ratio of the two plans' BPF run time per workload read,
	// round by round: a difference in points of the workload's CPU moved
	// with the machine (its other tasks' syscalls, which every program on
	// the global hooks filters, and the CPU's cost of a read against a
	// program run; docs/query-bench.md, issue #34). The difference stays
	// in the JSON as *_optimizer_minus_hand_written_pct_points.
	// Q2 keeps its points target: it was not seen to move, and its
	// per-read ratio (1.24 [1.08–1.28] in the first quick run after this
	// change) is over the bound: the Q2 plan's own cost, not the machine.
	if _, _, _, ok := rep.RatioSpread("q1_optimizer_vs_hand_written_bpf_ns_per_read"); ok {
		rep.TargetRatio("q1_optimizer_vs_hand_written_bpf_ns_per_read", "<=", maxPlanCostRatio)
	}
	if _, _, _, ok := rep.RatioSpread("q2_optimizer_minus_hand_written_pct_points"); ok {
		rep.TargetRatio("q2_optimizer_minus_hand_written_pct_points", "<=", 3)
	}
	for _, mode := range []string{"optimizer", "hand_written"} {
		if a := acc[mode+" q2"]; a != nil {
			rep.Target(mode+" q2 lost_events", float64(a.lost), "==", 0)
			rep.Target(mode+" q2 events_pread64 == workload_syscalls", float64(a.preads), "==", float64(a.workloadIOs))
		}
	}
	if a := acc["mvsf_only q2"]; a != nil {
		// Correct means nothing silently missing: every read written or counted lost.
		rep.Target("mvsf_only q2 events_pread64 + lost_events >= workload_syscalls", float64(a.preads+a.lost), ">=", float64(a.workloadIOs))
	}
	for _, mode := range []string{"optimizer", "mvsf_only"} {
		if ag, ok := agree[mode]; ok {
			v := 0.0
			if ag.agree {
				v = 1
			}
			rep.Target(mode+" q1 max_latency_agree", v, "==", 1)
		}
	}
	if a := acc["bpftrace q2"]; a != nil {
		rep.Note(fmt.Sprintf("bpftrace q2 loss measured: %d events lost (its \"Lost N events\"), %d lines written, %d of fio's %d reads",
			a.lost, a.events, a.preads, a.workloadIOs))
	}
}
