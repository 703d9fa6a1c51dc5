package capturebench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/accum"
	"github.com/cistern-ebpf/cistern/bench/capture/naive"
	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/plot"
	"github.com/cistern-ebpf/cistern/internal/servers"
)

// Options configure the capture benchmark.
type Options struct {
	Quick    bool
	Duration time.Duration // pgbench -T per mode and round (default 8s; quick 1s)
	Rounds   int           // interleaved rounds (default 5; quick 3)
	Clients  int           // pgbench -c (default 2; -j the same)
	Modes    []string      // subset of Modes
	Port     int           // PostgreSQL port (default 54339); MariaDB's is Port+1, churn's PostgreSQL Port+7
	PlotPath string
	Progress func(step string)
	// ChurnRing: the churn mode's ring size (0: the capture default, which
	// is what the mode is meant to judge).
	ChurnRing uint32
	// HoldNew: the accumulated and churn modes' captures run with
	// --hold-new (capture.Options.HoldNew).
	HoldNew bool
	// AttachExecs: the attach mode's execs of each kind over all rounds
	// (0: attachExecs, 200).
	AttachExecs int
}

// Modes are the modes, in order. The plain names use a 256 KiB ring.
// sysbench*: MariaDB with sysbench oltp_point_select over TLS (prepared
// statements), untraced and accumulated.
// churn: short-lived TLS connections, big answers, every capture default
// (churn.go).
// node_pg*: node-postgres over TLS from Node.js (OpenSSL inside node),
// untraced, naive and accumulated (node.go).
var Modes = []string{"untraced", "naive", "accumulated", "naive_4m", "accumulated_4m", "bpftrace",
	"sysbench", "sysbench_accumulated", "sysbench_accumulated_4m", "node_pg", "node_pg_naive", "node_pg_accumulated", "churn", "attach"}

// quickModes are --quick's modes: three rounds of every mode would take
// minutes, so the 4 MiB twins only where a target needs them.
var quickModes = []string{"untraced", "naive", "accumulated", "bpftrace", "sysbench", "sysbench_accumulated_4m",
	"node_pg", "node_pg_naive", "node_pg_accumulated"}

func (o *Options) defaults() {
	if o.Duration == 0 {
		o.Duration = 8 * time.Second
		if o.Quick {
			o.Duration = time.Second // pgbench -T counts whole seconds
		}
	}
	if o.Rounds == 0 {
		o.Rounds = benchkit.Rounds(o.Quick)
	}
	if o.Clients == 0 {
		o.Clients = 2
	}
	if len(o.Modes) == 0 {
		o.Modes = Modes
		if o.Quick {
			o.Modes = quickModes
		}
	}
	if o.Port == 0 {
		o.Port = 54339
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
}

// benchQuery tells pgbench -S's own statement from its setup queries.
func benchQuery(q string) bool { return strings.Contains(q, "FROM pgbench_accounts WHERE aid") }

type captureResult struct {
	sent, tps            float64
	captured             float64
	exact                float64 // captured queries whose latency is exact
	lostEvents, lostByte float64
	ringPer, eventsPS    float64
	cpuPct               float64
	cpuSec               float64 // the agent's CPU time over the run (cpuPct's numerator)
	idleCPU              float64 // the agent's CPU per second while attached to the stopped workload (idleCPU)
	badBytes             float64 // protocol bytes the parser skipped
	ok                   bool    // the tracer ran (bpftrace may be missing)
}

// cpuPerQueryRatio judges the accumulated agent's CPU against the naive
// one's: per query sent, within each round (both drain the same pgbench -S
// load, run next to each other), the median of the rounds' ratios <= 1/3.
// Each agent's CPU share (agent_cpu_pct, still reported) follows the rate
// pgbench reaches, which the machine sets: naive's measured 8.3 % in one
// quick run and 13.4 % in the run before, and a target of a third of
// naive's median moved with it (issue #34). CPU per query takes the rate
// out, and the round's pairing the machine's drift. What it keeps is each
// agent's fixed cost, which per query grows as the rate falls: their CPU
// per second while attached to the stopped workload (idleCPU) is reported
// as accumulated_vs_naive_agent_idle_cpu, not subtracted (it is the
// agent's cost; subtracted, the per-round ratios spread from -0.3 to 0.9
// at load 30). Queries sent, not captured: a naive agent that loses
// records gets no credit for the work it did not do.
//
// prefix names the pair: "" for pgbench's accumulated and naive modes,
// "node_pg_" for node-postgres's.
func cpuPerQueryRatio(rep *benchkit.Report, byRound map[int]map[string]float64, rounds int, prefix string) {
	name := prefix + "accumulated_vs_naive_agent_cpu_per_query"
	acc, naive := prefix+"accumulated", prefix+"naive"
	for i := range rounds {
		a, okA := byRound[i][acc]
		n, okN := byRound[i][naive]
		if okA && okN && n > 0 {
			rep.SampleRatio(name, a/n)
		}
		a, okA = byRound[i][acc+" idle"]
		n, okN = byRound[i][naive+" idle"]
		if okA && okN && n > 0 {
			rep.SampleRatio(prefix+"accumulated_vs_naive_agent_idle_cpu", a/n)
		}
	}
	rep.TargetRatio(name, "<=", 1.0/3)
}

// Run runs the capture benchmark and returns its report.
func Run(ctx context.Context, opt Options) (*benchkit.Report, error) {
	opt.defaults()
	rep := benchkit.New("capture", opt.Quick)
	rep.SetConfig("workload", "pgbench -S (select-only, simple protocol), scale 1, TLS on loopback")
	rep.SetConfig("seconds_per_mode", opt.Duration.Seconds())
	rep.SetConfig("rounds", opt.Rounds)
	rep.Headline("tps", "probe_effect_pct", "queries_captured", "lost_events", "ring_bytes_per_payload_byte", "agent_cpu_pct")
	rep.SetConfig("clients", opt.Clients)
	rep.SetConfig("ring_bytes", map[string]int{"default": 256 << 10, "_4m": 4 << 20})
	rep.SetConfig("naive_record_bytes", naive.RecordSize)

	opt.Progress("certificate and PostgreSQL")
	cert, err := servers.NewTLSCert()
	if err != nil {
		return nil, err
	}
	defer cert.Remove()
	// The pgbench PostgreSQL, unless only modes with their own workload
	// (churn, attach) run.
	var pg *servers.Postgres
	if slices.ContainsFunc(opt.Modes, func(m string) bool { return m != "churn" && m != "attach" }) {
		pg, err = servers.StartPostgres(servers.PostgresOptions{Port: opt.Port, Conf: cert.PostgresConf()})
		if err != nil {
			return nil, err
		}
		defer pg.Stop()
		opt.Progress("pgbench -i -s 1")
		init := exec.CommandContext(ctx, pg.Bin("pgbench"), pgArgs(pg, "-i", "-s", "1", "-q")...)
		init.Env = append(os.Environ(), "PGSSLMODE=require")
		if out, err := init.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pgbench -i: %v: %s", err, out)
		}
	}

	if slices.ContainsFunc(opt.Modes, isNodeMode) {
		if why := nodeAvailable(); why != "" {
			rep.Note("node_pg modes skipped: " + why)
			opt.Modes = slices.DeleteFunc(slices.Clone(opt.Modes), isNodeMode)
		} else {
			rep.SetConfig("node_pg_workload", "node-postgres (pg) over TLS from one Node.js process, simple and extended protocol in turn, one connection")
		}
	}
	var mb *mariadbBench
	for _, mode := range opt.Modes {
		if strings.HasPrefix(mode, "sysbench") && mb == nil {
			opt.Progress("MariaDB and sysbench prepare")
			if mb, err = startMariaDBBench(ctx, cert, opt.Port+1); servers.IsNotInstalled(err) {
				rep.Note(fmt.Sprintf("sysbench modes skipped: %v", err))
				opt.Modes = slices.DeleteFunc(slices.Clone(opt.Modes), func(m string) bool { return strings.HasPrefix(m, "sysbench") })
				break
			} else if err != nil {
				return nil, fmt.Errorf("mode %s: %w", mode, err)
			}
			defer mb.stop()
			rep.SetConfig("sysbench_workload", "sysbench oltp_point_select, 1 table of 10000 rows, MariaDB with TLS on loopback")
		}
	}
	// Interleaved rounds: each round runs every mode once, and each traced
	// mode's probe effect is against the same round's untraced run.
	res := map[string]captureResult{} // the last round's, for which ran
	base := map[string]float64{}      // this round's untraced tps per workload
	sum := map[string]float64{}       // per mode: queries missed and events lost, all rounds
	var churn churnTotals
	var attach attachTotals
	// The agents' CPU per query sent, by round and mode: the CPU target is
	// the ratio within each round (cpuPerQueryRatio).
	cpuPerQuery := map[int]map[string]float64{}
	err = benchkit.Interleave(ctx, opt.Rounds, opt.Modes, opt.Progress, func(ctx context.Context, round int, mode string) error {
		if mode == "attach" { // exec-to-attached latency (attach.go)
			r, err := runAttach(ctx, attachPerRound(opt.AttachExecs, opt.Rounds))
			if err != nil {
				return err
			}
			attach.add(rep, r)
			return nil
		}
		if mode == "churn" { // its own workload and server, one more mode of the round
			r, err := runChurn(ctx, cert, opt.Port+7, opt.ChurnRing, opt.HoldNew)
			if err != nil {
				return err
			}
			churn.add(rep, r)
			return nil
		}
		r, err := runCaptureMode(ctx, pg, mb, mode, opt)
		if err != nil {
			return err
		}
		res[mode] = r
		if !r.ok {
			return nil
		}
		sample := func(k string, v float64) { rep.Sample(mode, k, v) }
		workload := "pgbench"
		if strings.HasPrefix(mode, "sysbench") {
			workload = "sysbench" // queries per second, sysbench's own count
		}
		if isNodeMode(mode) {
			workload = "node_pg" // statements per second, the client's own count
		}
		if mode == "untraced" || mode == "sysbench" || mode == "node_pg" {
			base[workload] = r.tps
		}
		sample("tps", r.tps)
		sample("queries_sent", r.sent)
		if mode != "untraced" && mode != "bpftrace" && mode != "sysbench" && mode != "node_pg" {
			sample("queries_captured", r.captured)
			sample("lost_events", r.lostEvents)
			sample("lost_bytes", r.lostByte)
			sample("ring_bytes_per_payload_byte", r.ringPer)
			sample("events_per_sec", r.eventsPS)
			sample("agent_cpu_pct", r.cpuPct)
			if r.sent > 0 {
				if cpuPerQuery[round] == nil {
					cpuPerQuery[round] = map[string]float64{}
				}
				cpuPerQuery[round][mode] = r.cpuSec / r.sent
				cpuPerQuery[round][mode+" idle"] = r.idleCPU
			}
			sum[mode+" missed"] += r.sent - r.captured
			sum[mode+" lost"] += r.lostEvents
			if mode != "naive" && mode != "naive_4m" && mode != "node_pg_naive" {
				sample("protocol_bytes_skipped", r.badBytes)
				sample("latency_exact_pct", 100*r.exact/max(r.captured, 1))
			}
		}
		if mode == "bpftrace" {
			sample("events_per_sec", r.eventsPS)
			sample("agent_cpu_pct", r.cpuPct)
		}
		if b := base[workload]; b > 0 {
			sample("probe_effect_pct", (b-r.tps)/b*100)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if churn.rounds > 0 {
		churn.targets(rep)
	}
	if attach.rounds > 0 {
		attach.report(rep)
		// The attach figures in a table of their own, beside the others'.
		var others []string
		for _, m := range opt.Modes {
			if m != "attach" {
				others = append(others, m)
			}
		}
		rep.Section("modes", others, []string{"tps", "probe_effect_pct", "queries_captured", "lost_events",
			"ring_bytes_per_payload_byte", "agent_cpu_pct", "queries_issued", "queries_captured_client"})
		rep.Section("attach: exec (or libssl open) to uprobes attached, ms; start to exit, ms", []string{"attach"},
			[]string{"go_attach_ms_p50_all", "go_attach_ms_p99_all", "openssl_attach_ms_p50_all", "openssl_attach_ms_p99_all",
				"go_start_ms_untraced", "go_start_ms_hold", "go_hold_added_ms", "openssl_start_ms_untraced",
				"openssl_start_ms_hold", "openssl_hold_added_ms", "hold_timeouts", "agent_cpu_pct"})
	}
	if opt.HoldNew {
		rep.SetConfig("hold_new", true)
	}
	get := func(mode, k string) (float64, bool) {
		v, ok := rep.Get(mode, k)
		f, _ := v.(float64)
		return f, ok
	}
	ran := func(m string) bool { r, ok := res[m]; return ok && r.ok }
	if ran("accumulated") {
		rep.Target("accumulated queries_sent - queries_captured (all rounds)", sum["accumulated missed"], "==", 0)
		rep.Target("accumulated lost_events (all rounds)", sum["accumulated lost"], "==", 0)
		rep.TargetMetric("accumulated ring_bytes_per_payload_byte", "accumulated", "ring_bytes_per_payload_byte", "<=", 1.2)
		if ran("naive") {
			// Loss or ≥ 10 ring bytes per payload byte: one number that is
			// ≥ 10 when either holds.
			v, _ := get("naive", "ring_bytes_per_payload_byte")
			if sum["naive lost"] > 0 {
				v = max(v, 10)
			}
			rep.Target("naive lost_events > 0 or ring_bytes_per_payload_byte >= 10", v, ">=", 10)
			rep.PairedRatio("naive_vs_accumulated_agent_cpu", "naive", "agent_cpu_pct", "accumulated", "agent_cpu_pct")
			cpuPerQueryRatio(rep, cpuPerQuery, opt.Rounds, "")
		}
		if ran("bpftrace") {
			// Per round: both probe effects are against that round's
			// untraced run, so their difference cancels the round's load.
			rep.PairedDiff("accumulated_minus_bpftrace_probe_effect_pct_points", "accumulated", "probe_effect_pct", "bpftrace", "probe_effect_pct")
			rep.TargetRatio("accumulated_minus_bpftrace_probe_effect_pct_points", "<=", 5)
		}
	}
	if ran("node_pg_accumulated") {
		rep.Target("node_pg_accumulated queries_sent - queries_captured (all rounds)", sum["node_pg_accumulated missed"], "==", 0)
		rep.Target("node_pg_accumulated lost_events (all rounds)", sum["node_pg_accumulated lost"], "==", 0)
		rep.TargetMetric("node_pg_accumulated ring_bytes_per_payload_byte", "node_pg_accumulated", "ring_bytes_per_payload_byte", "<=", 1.2)
		if ran("node_pg_naive") {
			// The same form as pgbench's (issue #34): CPU per query sent,
			// accumulated over naive within each round.
			cpuPerQueryRatio(rep, cpuPerQuery, opt.Rounds, "node_pg_")
			rep.PairedRatio("node_pg_naive_vs_accumulated_agent_cpu", "node_pg_naive", "agent_cpu_pct", "node_pg_accumulated", "agent_cpu_pct")
		}
	}
	if ran("sysbench_accumulated_4m") {
		rep.Target("sysbench_accumulated_4m queries_sent - queries_captured (all rounds)", sum["sysbench_accumulated_4m missed"], "==", 0)
		rep.Target("sysbench_accumulated_4m lost_events (all rounds)", sum["sysbench_accumulated_4m lost"], "==", 0)
	}
	if _, ok := res["sysbench"]; ok {
		rep.Note("sysbench modes: MariaDB over TLS, sysbench oltp_point_select (one prepared statement per " +
			"connection, COM_STMT_EXECUTE per query); tps is sysbench's queries per second, queries_captured counts " +
			"captured executions of `SELECT c FROM sbtest1 WHERE id=?` (the text from its COM_STMT_PREPARE)")
	}
	if b, ok := res["bpftrace"]; ok && !b.ok {
		rep.Note("bpftrace not installed: the bpftrace reference was skipped")
	}
	rep.Note("queries_sent is pgbench's transaction count; queries_captured counts captured " +
		"`SELECT abalance FROM pgbench_accounts WHERE aid = …` statements (naive: the same PostgreSQL parser fed fragment by fragment; a message cut at 960 bytes is lost)")
	rep.Note("agent_cpu_pct: this process's CPU time (getrusage) over the run's wall time while draining; " +
		"bpftrace: its own utime+stime over the same interval (startup and compilation excluded)")
	rep.Note("the BPF programs run in pgbench's context: their cost shows in probe_effect_pct, not in agent_cpu_pct")
	if opt.PlotPath != "" {
		var s []plot.BarSeries
		for _, m := range opt.Modes {
			if strings.HasPrefix(m, "sysbench") {
				continue // another workload: its rate is in the table, not on this axis
			}
			if v, lo, hi, ok := rep.Spread(m, "tps"); ok {
				s = append(s, plot.BarSeries{Name: m, Values: []float64{v}, Lo: []float64{lo}, Hi: []float64{hi}})
			}
		}
		title, ylabel, groups := "Capture: pgbench -S over TLS ("+rep.Kernel()+")", "transactions per second", []string{"pgbench -S"}
		if len(s) == 0 && attach.rounds > 0 { // the attach mode alone: its latencies
			title, ylabel, groups = "Capture: exec (or libssl open) to uprobes attached ("+rep.Kernel()+")", "ms", []string{"Go program", "libssl copy"}
			s = []plot.BarSeries{
				{Name: "median", Values: []float64{benchkit.Median(attach.goLat), benchkit.Median(attach.sslLat)}},
				{Name: "p99", Values: []float64{benchkit.Percentile(attach.goLat, 99), benchkit.Percentile(attach.sslLat, 99)}},
			}
		}
		if err := plot.BarChart(opt.PlotPath, title, ylabel, groups, s); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func pgArgs(pg *servers.Postgres, extra ...string) []string {
	return append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(pg.Opt.Port), "-U", "postgres"}, append(extra, "postgres")...)
}

var (
	reTx  = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	reTPS = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
)

// pgbenchRun is a started pgbench, stopped (SIGSTOP) as soon as it has
// mapped libssl so that a tracer can attach before its first query.
type pgbenchRun struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
	// resumeFn, if set, starts the workload instead of SIGCONT (the node
	// client waits on its standard input).
	resumeFn func() error
}

func startPgbench(ctx context.Context, pg *servers.Postgres, opt Options, stop bool) (*pgbenchRun, error) {
	c := strconv.Itoa(opt.Clients)
	secs := strconv.Itoa(max(1, int(opt.Duration.Seconds())))
	return startStopped(func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, pg.Bin("pgbench"), pgArgs(pg, "-n", "-S", "-T", secs, "-c", c, "-j", c)...)
		cmd.Env = append(os.Environ(), "PGSSLMODE=require")
		return cmd
	}, stop)
}

// startStopped starts the command mk makes and, with stop, stops it
// (SIGSTOP) as soon as it has mapped libssl: before it connects, so a tracer
// sees every query. If this process was too slow to see that moment (the
// workload already has a socket when it stops, which a loaded machine
// causes), it starts a new one.
func startStopped(mk func() *exec.Cmd, stop bool) (*pgbenchRun, error) {
	for try := 0; ; try++ {
		r := &pgbenchRun{cmd: mk(), done: make(chan error, 1)}
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		name := filepath.Base(r.cmd.Path)
		if err := r.cmd.Start(); err != nil {
			return nil, err
		}
		go func() { r.done <- r.cmd.Wait() }()
		if !stop {
			return r, nil
		}
		pid := r.cmd.Process.Pid
		for deadline := time.Now().Add(10 * time.Second); ; {
			if _, err := capture.FindLibSSL(pid); err == nil {
				break
			}
			if time.Now().After(deadline) {
				r.kill()
				return nil, fmt.Errorf("%s never mapped libssl: %s", name, r.out.String())
			}
			time.Sleep(50 * time.Microsecond)
		}
		if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
			r.kill()
			return nil, err
		}
		for deadline := time.Now().Add(2 * time.Second); !stopped(pid); {
			if time.Now().After(deadline) {
				r.kill()
				return nil, fmt.Errorf("%s did not stop", name)
			}
			time.Sleep(100 * time.Microsecond)
		}
		if !hasSocket(pid) {
			return r, nil
		}
		r.kill()
		if try == 4 {
			return nil, fmt.Errorf("%s connected before it could be stopped, 5 times", name)
		}
	}
}

// hasSocket tells whether pid has a socket open.
// stopped: pid is in state T (stopped by a signal).
func stopped(pid int) bool {
	f := benchkit.ProcStat(pid)
	return len(f) > 0 && f[0] == "T"
}

func hasSocket(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			return true
		}
	}
	return false
}

func (r *pgbenchRun) resume() error {
	if r.resumeFn != nil {
		return r.resumeFn()
	}
	return unix.Kill(r.cmd.Process.Pid, unix.SIGCONT)
}

func isNodeMode(m string) bool { return strings.HasPrefix(m, "node_pg") }

func (r *pgbenchRun) kill() {
	r.cmd.Process.Kill()
	<-r.done
}

// result parses pgbench's report once it has exited.
func (r *pgbenchRun) result(err error) (sent, tps float64, e error) {
	if err != nil {
		return 0, 0, fmt.Errorf("pgbench: %v: %s", err, r.out.String())
	}
	m, t := reTx.FindStringSubmatch(r.out.String()), reTPS.FindStringSubmatch(r.out.String())
	if m == nil || t == nil {
		return 0, 0, fmt.Errorf("pgbench output not understood: %s", r.out.String())
	}
	sent, _ = strconv.ParseFloat(m[1], 64)
	tps, _ = strconv.ParseFloat(t[1], 64)
	return sent, tps, nil
}

func runCaptureMode(ctx context.Context, pg *servers.Postgres, mb *mariadbBench, mode string, opt Options) (captureResult, error) {
	ring := uint32(256 << 10)
	if strings.HasSuffix(mode, "_4m") {
		ring = 4 << 20
	}
	switch strings.TrimSuffix(mode, "_4m") {
	case "untraced":
		pb, err := startPgbench(ctx, pg, opt, false)
		if err != nil {
			return captureResult{}, err
		}
		sent, tps, err := pb.result(<-pb.done)
		return captureResult{sent: sent, tps: tps, ok: true}, err
	case "accumulated":
		return runAccumulated(ctx, pg, ring, opt)
	case "naive":
		return runNaive(ctx, pg, ring, opt)
	case "bpftrace":
		return runBpftrace(ctx, pg, opt)
	case "sysbench":
		return runSysbench(ctx, mb, false, ring, opt)
	case "sysbench_accumulated":
		return runSysbench(ctx, mb, true, ring, opt)
	case "node_pg", "node_pg_naive", "node_pg_accumulated":
		return runNodePG(ctx, pg, mode, ring, opt)
	}
	return captureResult{}, fmt.Errorf("unknown mode (want %s)", strings.Join(Modes, ", "))
}

// drain calls next until pgbench has exited and nothing arrived for idle.
func drain(pb *pgbenchRun, next func() error) (pbErr error, err error) {
	const idle = 500 * time.Millisecond
	exited := false
	last := time.Now()
	for !exited || time.Since(last) < idle {
		err := next()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			if !exited {
				select {
				case pbErr = <-pb.done:
					exited, last = true, time.Now()
				default:
				}
			}
		case err != nil:
			if !exited {
				pb.kill()
			}
			return nil, err
		default:
			last = time.Now()
		}
	}
	return pbErr, nil
}

// idleWindow is how long idleCPU watches an agent with nothing to read:
// five of the bench's 100 ms Next deadlines (the accumulated pump itself
// sleeps until the kernel wakes it, accum.bpf.h WAKEUPS).
const idleWindow = 500 * time.Millisecond

// idleCPU calls next, as drain does, for idleWindow while the workload is
// still stopped, and returns the agent's CPU per second of it: its fixed
// cost, paid whatever the query rate (reported, cpuPerQueryRatio).
func idleCPU(next func() error) (float64, error) {
	cpu0, t0 := benchkit.SelfCPU(), time.Now()
	for time.Since(t0) < idleWindow {
		if err := next(); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, err
		}
	}
	return (benchkit.SelfCPU() - cpu0).Seconds() / time.Since(t0).Seconds(), nil
}

func runAccumulated(ctx context.Context, pg *servers.Postgres, ring uint32, opt Options) (captureResult, error) {
	pb, err := startPgbench(ctx, pg, opt, true)
	if err != nil {
		return captureResult{}, err
	}
	c, err := capture.Open(capture.Options{PID: pb.cmd.Process.Pid, Transport: capture.TransportTLS, Accum: accum.Config{RingSize: ring},
		HoldNew: opt.HoldNew})
	if err != nil {
		pb.kill()
		return captureResult{}, err
	}
	defer c.Close()
	return measureCapture(pb, c, func(q capture.Query) bool { return benchQuery(q.Query) }, pb.result)
}

// measureCapture resumes the stopped workload pb under the open capture c,
// counts the captured queries that count accepts, and fills in the
// channel's figures; result reads the workload's own count and rate.
func measureCapture(pb *pgbenchRun, c *capture.Capture, count func(capture.Query) bool,
	result func(error) (sent, rate float64, err error)) (captureResult, error) {
	var r captureResult
	next := func() error {
		qs, err := c.Next(100 * time.Millisecond)
		for _, q := range qs {
			if count(q) {
				r.captured++
				if q.LatencyExact {
					r.exact++
				}
			}
		}
		return err
	}
	var err error
	if r.idleCPU, err = idleCPU(next); err != nil {
		pb.kill()
		return r, err
	}
	cpu0, t0 := benchkit.SelfCPU(), time.Now()
	if err := pb.resume(); err != nil {
		pb.kill()
		return r, err
	}
	pbErr, err := drain(pb, next)
	if err != nil {
		return r, err
	}
	wall, cpu := time.Since(t0), benchkit.SelfCPU()-cpu0
	if r.sent, r.tps, err = result(pbErr); err != nil {
		return r, err
	}
	st, err := c.Stats()
	if err != nil {
		return r, err
	}
	r.lostEvents = float64(st.LostRecords + st.BusyDrops + st.NoConn + st.Faults)
	r.lostByte = float64(st.LostBytes)
	r.badBytes = float64(c.BadBytes())
	r.ringPer = st.RingPerPayload()
	r.eventsPS = float64(st.Records) / wall.Seconds()
	r.cpuPct = cpu.Seconds() / wall.Seconds() * 100
	r.cpuSec = cpu.Seconds()
	r.ok = true
	return r, nil
}

func runNaive(ctx context.Context, pg *servers.Postgres, ring uint32, opt Options) (captureResult, error) {
	pb, err := startPgbench(ctx, pg, opt, true)
	if err != nil {
		return captureResult{}, err
	}
	return runNaiveOn(pb, ring, benchQuery, pb.result)
}

// runNaiveOn traces the waiting workload pb with the naive channel and
// counts the queries count accepts; result reads the workload's count and
// rate.
func runNaiveOn(pb *pgbenchRun, ring uint32, count func(string) bool, result func(error) (sent, rate float64, err error)) (captureResult, error) {
	n, err := naive.Open(pb.cmd.Process.Pid, ring)
	if err != nil {
		pb.kill()
		return captureResult{}, err
	}
	defer n.Close()
	var r captureResult
	// The same PostgreSQL parser as the accumulated agent, fed fragment by
	// fragment: both agents do the same work per query, only the channel
	// differs. A query split over a lost record is not counted.
	parser := capture.NewPGParser()
	next := func() error {
		rec, err := n.Next(100 * time.Millisecond)
		if err == nil {
			for _, q := range parser.Feed(rec.SSL, accum.Direction(rec.Dir), rec.Data, rec.TS, rec.PID) {
				if count(q.Query) {
					r.captured++
				}
			}
		}
		return err
	}
	if r.idleCPU, err = idleCPU(next); err != nil {
		pb.kill()
		return r, err
	}
	cpu0, t0 := benchkit.SelfCPU(), time.Now()
	if err := pb.resume(); err != nil {
		pb.kill()
		return r, err
	}
	pbErr, err := drain(pb, next)
	if err != nil {
		return r, err
	}
	wall, cpu := time.Since(t0), benchkit.SelfCPU()-cpu0
	if r.sent, r.tps, err = result(pbErr); err != nil {
		return r, err
	}
	st, err := n.Stats()
	if err != nil {
		return r, err
	}
	r.lostEvents, r.lostByte = float64(st.LostRecords), float64(st.LostBytes)
	if st.PayloadBytes > 0 {
		// What the ring was asked to carry, lost records included.
		r.ringPer = float64((st.Records+st.LostRecords)*(naive.RecordSize+8)) / float64(st.PayloadBytes)
	}
	r.eventsPS = float64(st.Records) / wall.Seconds()
	r.cpuPct = cpu.Seconds() / wall.Seconds() * 100
	r.cpuSec = cpu.Seconds()
	r.ok = true
	return r, nil
}

// runBpftrace counts the same uprobes with bpftrace -p.
func runBpftrace(ctx context.Context, pg *servers.Postgres, opt Options) (captureResult, error) {
	bt, err := exec.LookPath("bpftrace")
	if err != nil {
		return captureResult{}, nil // skipped, with a note
	}
	pb, err := startPgbench(ctx, pg, opt, true)
	if err != nil {
		return captureResult{}, err
	}
	pid := pb.cmd.Process.Pid
	lib, err := capture.FindLibSSL(pid)
	if err != nil {
		pb.kill()
		return captureResult{}, err
	}
	lib = strings.TrimPrefix(lib, fmt.Sprintf("/proc/%d/root", pid))
	var probes []string
	for _, s := range []string{"SSL_write", "SSL_read", "SSL_write_ex", "SSL_read_ex"} {
		probes = append(probes, "uprobe:"+lib+":"+s, "uretprobe:"+lib+":"+s)
	}
	script := "BEGIN { printf(\"ready\\n\"); } " + strings.Join(probes, ", ") + " { @n = count(); }"
	cmd := exec.CommandContext(ctx, bt, "-p", strconv.Itoa(pid), "-e", script)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		pb.kill()
		return captureResult{}, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		pb.kill()
		return captureResult{}, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	ready := make(chan bool, 1)
	lines := make(chan string, 16)
	go func() {
		r := false
		for sc.Scan() {
			if !r && strings.TrimSpace(sc.Text()) == "ready" {
				r = true
				ready <- true
				continue
			}
			lines <- sc.Text()
		}
		if !r {
			ready <- false
		}
		close(lines)
	}()
	select {
	case ok := <-ready:
		if !ok {
			pb.kill()
			return captureResult{}, fmt.Errorf("bpftrace: %s", stderr.String())
		}
	case <-time.After(60 * time.Second):
		pb.kill()
		return captureResult{}, fmt.Errorf("bpftrace did not start: %s", stderr.String())
	}
	var r captureResult
	cpu0, t0 := benchkit.ProcCPU(cmd.Process.Pid), time.Now()
	if err := pb.resume(); err != nil {
		pb.kill()
		return r, err
	}
	pbErr := <-pb.done
	wall, cpu := time.Since(t0), benchkit.ProcCPU(cmd.Process.Pid)-cpu0
	if r.sent, r.tps, err = pb.result(pbErr); err != nil {
		return r, err
	}
	cmd.Process.Signal(syscall.SIGINT)
	for l := range lines {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "@n: "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			r.eventsPS = n / wall.Seconds()
		}
	}
	r.ringPer = 0
	r.cpuPct = cpu.Seconds() / wall.Seconds() * 100
	r.cpuSec = cpu.Seconds()
	r.ok = true
	return r, nil
}
