package cbufbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/plot"
)

// Options configure `cistern bench cbuf`.
type Options struct {
	Quick    bool
	PlotPath string
	Progress func(string)
	NoIox2   bool     // skip iceoryx2 (no cargo, no network)
	Parts    []string // fast, rtt, gc, policy, grant (default all); web: servers, send, contention
	Workload string   // "" or ipc: the parts above; web: web.go
}

var cbufPages = []int{1, 4, 16, 64}

// Parts are the experiments, in the order they run.
var Parts = []string{"fast", "rtt", "gc", "policy", "grant"}

// Run runs the CBUF experiments of issue #7: fast-path cost beside
// malloc, round trips against pipes, sockets and iceoryx2, allocation cost
// against pool size with collection, and the pool policies; and #29's
// first receipt of a buffer across uids (grant). Workload web runs the web
// server experiments instead (web.go).
func Run(ctx context.Context, opt Options) (*benchkit.Report, error) {
	switch opt.Workload {
	case "", "ipc":
	case "web":
		return Web(ctx, opt)
	default:
		return nil, fmt.Errorf("unknown workload %q (have ipc, web)", opt.Workload)
	}
	if opt.Progress == nil {
		opt.Progress = func(string) {}
	}
	part := map[string]bool{}
	for _, p := range opt.Parts {
		if !slices.Contains(Parts, p) {
			return nil, fmt.Errorf("unknown part %q (have %s)", p, strings.Join(Parts, ", "))
		}
		part[p] = true
	}
	if len(part) == 0 {
		for _, p := range Parts {
			part[p] = true
		}
	}
	rep := benchkit.New("cbuf", opt.Quick)
	dir := cbufCacheDir()
	opt.Progress("building libcbuf and the C peers")
	peer, jepeer, err := buildCBufPeers(dir)
	if err != nil {
		return nil, err
	}
	iox2 := ""
	if !opt.NoIox2 && part["rtt"] {
		if iox2, err = buildIox2(ctx, dir, opt.Progress); err != nil {
			rep.Note("iceoryx2 modes skipped: " + benchkit.FirstLine(err.Error()))
			iox2 = ""
		}
	}
	tmp, err := os.MkdirTemp("", "cistern-bench-cbuf")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	if part["fast"] {
		if err := cbufFast(ctx, rep, opt, tmp, peer, jepeer); err != nil {
			return nil, err
		}
	}
	if part["rtt"] {
		cpuIdleConfig(rep)
		if err := cbufRTT(ctx, rep, opt, tmp, peer, iox2); err != nil {
			return nil, err
		}
	}
	if part["gc"] {
		if err := cbufGC(ctx, rep, opt, tmp, peer); err != nil {
			return nil, err
		}
	}
	var series []plot.Series
	if part["policy"] {
		if series, err = cbufPolicies(ctx, rep, opt, tmp, peer); err != nil {
			return nil, err
		}
	}
	if part["grant"] {
		if err := cbufGrant(ctx, rep, opt, tmp, peer); err != nil {
			return nil, err
		}
	}
	cbufSections(rep, iox2 != "")
	if opt.PlotPath != "" && part["policy"] {
		if err := plot.LineChart(opt.PlotPath, "CBUF policies: producer throughput while an allocator interferes ("+rep.Kernel()+")",
			"seconds", "producer messages per second", series); err != nil {
			return nil, err
		}
		base := strings.TrimSuffix(opt.PlotPath, filepath.Ext(opt.PlotPath))
		if err := plotCBufRTT(rep, base+"-rtt.png", iox2 != ""); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// cbufSections prints each experiment as its own small table.
func cbufSections(rep *benchkit.Report, iox2 bool) {
	sizes := func(prefix string) []string {
		var cs []string
		for _, p := range cbufPages {
			cs = append(cs, fmt.Sprintf("%s_%dp", prefix, p))
		}
		return cs
	}
	rep.Section("fast path, ns per alloc+free (malloc+free for glibc and jemalloc), by pages",
		[]string{"fast_cbuf", "fast_glibc", "fast_jemalloc"}, sizes("alloc_free_ns"))
	rep.Section("round trip between two processes, microseconds, by pages", rttModes(iox2), sizes("rtt_us"))
	var pools []string
	for _, p := range cbufGCPools {
		pools = append(pools, fmt.Sprintf("alloc_ns_pool_%dp", p))
	}
	rep.Section("1-page allocation with collection, ns, by pool size (pages)", []string{"alloc_vs_pool"}, pools)
	rep.Section("first receipt of a buffer across uids (#29), one-page messages", cbufGrantModes, cbufGrantCols)
	rep.Section("pool policies", policyModes,
		[]string{"producer_msgs_per_sec_quiet", "producer_msgs_per_sec_interference", "producer_blocked_pct_interference", "interferer_blocked_pct_interference"})
}

// withManager runs an in-process manager for one experiment.
func withManager(ctx context.Context, tmp string, opt cbuf.ManagerOptions, fn func(sock string, m *cbuf.Manager) error) error {
	opt.Socket = filepath.Join(tmp, fmt.Sprintf("m%d.sock", time.Now().UnixNano()))
	m, err := cbuf.NewManager(opt)
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.Run(mctx) }()
	err = fn(opt.Socket, m)
	cancel()
	wg.Wait()
	return err
}

// runKV runs a peer and parses its "key value" lines.
func runKV(ctx context.Context, env []string, bin string, args ...string) (map[string]float64, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = benchkit.FirstLine(string(ee.Stderr))
		}
		return nil, fmt.Errorf("%s %s: %v %s", filepath.Base(bin), strings.Join(args, " "), err, msg)
	}
	kv := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				kv[f[0]] = v
			}
		}
	}
	return kv, nil
}

func cbufFast(ctx context.Context, rep *benchkit.Report, opt Options, tmp, peer, jepeer string) error {
	iters := 2000000
	if opt.Quick {
		iters = 300000
	}
	// Rounds interleave the peers (cbuf with glibc beside it, jemalloc);
	// every row's figure is malloc+free or alloc+free, one column per size.
	peers := []string{"cbuf"}
	if jepeer != "" {
		peers = append(peers, "jemalloc")
	}
	return withManager(ctx, tmp, cbuf.ManagerOptions{Memory: 256 << 20, Pool: 64 << 20, Interval: time.Hour}, func(sock string, _ *cbuf.Manager) error {
		n := max(iters/cbufRounds(opt), 20000)
		err := benchkit.Interleave(ctx, cbufRounds(opt), peers, func(s string) { opt.Progress("fast path: " + s) }, func(ctx context.Context, _ int, which string) error {
			for _, p := range cbufPages {
				sfx := fmt.Sprintf("_%dp", p)
				if which == "jemalloc" {
					je, err := runKV(ctx, nil, jepeer, "fast", sock, strconv.Itoa(p), strconv.Itoa(n))
					if err != nil {
						return err
					}
					rep.Sample("fast_jemalloc", "alloc_free_ns"+sfx, je["malloc_free_ns"])
					continue
				}
				kv, err := runKV(ctx, nil, peer, "fast", sock, strconv.Itoa(p), strconv.Itoa(n))
				if err != nil {
					return err
				}
				for _, k := range []string{"alloc_free_ns", "alloc_ns", "free_ns", "send_ns", "cbuf2buf_ns"} {
					rep.Sample("fast_cbuf", k+sfx, kv[k])
				}
				rep.Sample("fast_glibc", "alloc_free_ns"+sfx, kv["malloc_free_ns"])
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Judged against glibc's malloc+free of the same size, timed by
		// the same peer process in the same round: the nanoseconds move
		// with the machine (a slower one measured CBUF 52.3 ns where this
		// VM measures 13-20, and glibc 54.0 there), the ratio does not.
		// fast_cbuf's alloc_free_ns stay reported (issue #34).
		rep.PairedRatio("cbuf_vs_glibc_alloc_free_1p", "fast_cbuf", "alloc_free_ns_1p", "fast_glibc", "alloc_free_ns_1p")
		rep.TargetRatio("cbuf_vs_glibc_alloc_free_1p", "<=", 1.0)
		if jepeer == "" {
			rep.Note("jemalloc baseline skipped: Debian's libjemalloc-dev is not installed")
		}
		rep.Note("fast_glibc and fast_jemalloc: alloc_free_ns is malloc+free of the same size")
		return nil
	})
}

func cbufRounds(opt Options) int { return benchkit.Rounds(opt.Quick) }

func cbufRTT(ctx context.Context, rep *benchkit.Report, opt Options, tmp, peer, iox2 string) error {
	iters := func(p int) int {
		n := 20000
		if p >= 16 {
			n = 5000
		}
		if opt.Quick {
			n /= 5
		}
		return n
	}
	modes := rttModes(iox2 != "")
	// Blocking wake-ups on an idle VM are bimodal (a peer whose core went
	// idle costs 20-70 us more to wake), so one long run per mode is a coin
	// toss. Each size runs the modes in interleaved rounds and reports the
	// median round, with the spread beside it. A round costs milliseconds,
	// so this part runs three times the other parts' rounds: about one
	// round in four of cbuf_block against pipe at 64 pages landed above
	// 0.1 on the project's VM, so a median of three crossed the target in
	// about one quick run in seven; a median of nine does not.
	rounds := 3 * cbufRounds(opt)
	rep.SetConfig("rtt_rounds", rounds)
	return withManager(ctx, tmp, cbuf.ManagerOptions{Memory: 1 << 30, Interval: time.Hour}, func(sock string, _ *cbuf.Manager) error {
		for _, p := range cbufPages {
			n := max(iters(p)/rounds, 200)
			for r := 0; r < rounds; r++ {
				for _, mode := range modes {
					opt.Progress(fmt.Sprintf("round trip %s, %d pages, round %d/%d", mode, p, r+1, rounds))
					var ns float64
					base, oneCore := strings.CutSuffix(mode, oneCoreSuffix)
					if strings.HasPrefix(base, "iceoryx2") {
						v, err := iox2RTT(ctx, iox2, strings.TrimPrefix(base, "iceoryx2_"), p*4096, n, oneCore)
						if err != nil {
							return err
						}
						ns = v
					} else {
						bin, args := peer, []string{"rtt", sock, base, strconv.Itoa(p), strconv.Itoa(n)}
						if oneCore {
							bin, args = "taskset", append([]string{"-c", "0", peer}, args...)
						}
						kv, err := runKV(ctx, nil, bin, args...)
						if err != nil {
							return err
						}
						ns = kv["rtt_ns"]
					}
					rep.Sample(mode, fmt.Sprintf("rtt_us_%dp", p), ns/1000)
				}
			}
		}
		// Ratios round by round (the rounds pair the modes), judged on
		// their medians.
		ratio := func(name, a, b string, p int, want float64, target string) {
			m := fmt.Sprintf("rtt_us_%dp", p)
			rep.PairedRatio(name, a, m, b, m)
			rep.TargetRatio(name, "<=", want)
			_ = target
		}
		ratio("cbuf_poll_vs_pipe_1p", "cbuf_poll", "pipe", 1, 0.1, "")
		ratio("cbuf_poll_vs_pipe_64p", "cbuf_poll", "pipe", 64, 0.02, "")
		ratio("cbuf_block_vs_pipe_64p", "cbuf_block", "pipe", 64, 0.1, "")
		ratio("cbuf_block_vs_pipe_64p_1core", "cbuf_block_1core", "pipe_1core", 64, 0.1, "")
		if iox2 != "" {
			ratio("cbuf_poll_vs_iceoryx2_poll_64KiB", "cbuf_poll", "iceoryx2_poll", 16, 1.5, "")
			ratio("cbuf_block_vs_iceoryx2_block_64KiB", "cbuf_block", "iceoryx2_block", 16, 1.5, "")
			ratio("cbuf_block_vs_iceoryx2_block_64KiB_1core", "cbuf_block_1core", "iceoryx2_block_1core", 16, 1.5, "")
		}
		return nil
	})
}

// oneCoreSuffix names a blocking variant whose two processes share CPU 0.
// Where the scheduler puts a blocking pair decides its round trip on a VM
// more than the wake-up mechanism does: on one core a hand-off is a context
// switch (2-5 us); across cores each wake-up of an idle vCPU costs 15-40 us
// more. The scheduler's own choice differs between runs and between peers
// (it keeps the iceoryx2 pair together, and splits a forked pair about half
// the time), so the blocking modes run both ways: like is compared with
// like only at the same placement.
const oneCoreSuffix = "_1core"

// rttModes lists the round-trip variants. Pollers always get a core each.
func rttModes(iox2 bool) []string {
	modes := []string{"cbuf_poll", "cbuf_block", "pipe", "unix_socket"}
	if iox2 {
		modes = append(modes, "iceoryx2_poll", "iceoryx2_block")
	}
	for _, m := range modes {
		if !strings.HasSuffix(m, "_poll") {
			modes = append(modes, m+oneCoreSuffix)
		}
	}
	return modes
}

var iox2Seq int

func iox2RTT(ctx context.Context, bin, variant string, size, iters int, oneCore bool) (float64, error) {
	// A pair of iceoryx2 pollers once spun for minutes without a round
	// trip (a sample lost between them): each try has a deadline, and a
	// second stuck try is an error, not a hang.
	for try := 0; ; try++ {
		v, err := iox2RTTOnce(ctx, bin, variant, size, iters, oneCore)
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return v, err
		}
		if try == 1 {
			return 0, fmt.Errorf("iceoryx2 %s peers: no result within %v, twice: %w", variant, iox2Deadline, err)
		}
	}
}

// iox2Deadline bounds one iceoryx2 round trip run (a few thousand round
// trips take well under a second).
const iox2Deadline = 30 * time.Second

func iox2RTTOnce(ctx context.Context, bin, variant string, size, iters int, oneCore bool) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, iox2Deadline)
	defer cancel()
	iox2Seq++
	tag := fmt.Sprintf("cistern-%d-%d", os.Getpid(), iox2Seq)
	// Each peer on its own core, like cbufbench's (taskset: util-linux).
	cmd := func(role string, cpu int) *exec.Cmd {
		args := []string{bin, role, strconv.Itoa(size), strconv.Itoa(iters), variant, tag}
		if oneCore {
			cpu = 0
		}
		if runtime.NumCPU() > 1 {
			args = append([]string{"taskset", "-c", strconv.Itoa(cpu)}, args...)
		}
		return exec.CommandContext(ctx, args[0], args[1:]...)
	}
	pong := cmd("pong", 1)
	if err := pong.Start(); err != nil {
		return 0, err
	}
	out, err := cmd("ping", 0).Output()
	pong.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("iceoryx2 peer: %v", err)
	}
	return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
}

// cbufGC is the paper's Figure 7: a 1-page alloc+send+free loop whose
// buffers a second process receives and frees, so every refill of the
// free list is a collection; larger pools collect more per request.
func cbufGC(ctx context.Context, rep *benchkit.Report, opt Options, tmp, peer string) error {
	iters := 400000
	if opt.Quick {
		iters = 60000
	}
	n := max(iters/cbufRounds(opt), 10000)
	var names []string
	for _, pool := range cbufGCPools {
		names = append(names, strconv.Itoa(pool))
	}
	return benchkit.Interleave(ctx, cbufRounds(opt), names, func(s string) { opt.Progress("allocation cost with collection, pool of pages: " + s) },
		func(ctx context.Context, _ int, name string) error {
			pool, _ := strconv.Atoi(name)
			return withManager(ctx, tmp, cbuf.ManagerOptions{Memory: 64 << 20, Pool: uint64(pool) * 4096, Interval: time.Hour}, func(sock string, _ *cbuf.Manager) error {
				kv, err := runKV(ctx, nil, peer, "gc", sock, strconv.Itoa(n), strconv.Itoa(pool))
				if err != nil {
					return err
				}
				rep.Sample("alloc_vs_pool", fmt.Sprintf("alloc_ns_pool_%dp", pool), kv["alloc_ns"])
				rep.Sample("alloc_vs_pool", fmt.Sprintf("allocs_per_collection_pool_%dp", pool), float64(n)/max(kv["collects"], 1))
				return nil
			})
		})
}

var cbufGCPools = []int{16, 64, 256, 1024, 4096}

func plotCBufRTT(rep *benchkit.Report, path string, iox2 bool) error {
	modes := rttModes(iox2)
	var series []plot.BarSeries
	for _, m := range modes {
		s := plot.BarSeries{Name: m}
		for _, p := range cbufPages {
			med, lo, hi, _ := rep.Spread(m, fmt.Sprintf("rtt_us_%dp", p))
			if math.IsNaN(med) {
				med, lo, hi = 0, 0, 0
			}
			s.Values, s.Lo, s.Hi = append(s.Values, med), append(s.Lo, lo), append(s.Hi, hi)
		}
		series = append(series, s)
	}
	var groups []string
	for _, p := range cbufPages {
		groups = append(groups, fmt.Sprintf("%d KiB", p*4))
	}
	return plot.BarChart(path, "CBUF round trip between two processes ("+rep.Kernel()+")", "round trip, microseconds", groups, series)
}

// PingPong is the demo's piece: a two-process ping-pong of pages-page
// messages over CBUF (futex wake-up and busy polling) and over a pipe,
// returning the round trip in microseconds per mode.
func PingPong(ctx context.Context, pages, iters int) (map[string]float64, error) {
	peer, _, err := buildCBufPeers(cbufCacheDir())
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "cistern-cbuf-demo")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := map[string]float64{}
	err = withManager(ctx, tmp, cbuf.ManagerOptions{Memory: 256 << 20, Interval: time.Hour}, func(sock string, _ *cbuf.Manager) error {
		for _, mode := range []string{"cbuf_block", "cbuf_poll", "pipe"} {
			kv, err := runKV(ctx, nil, peer, "rtt", sock, mode, strconv.Itoa(pages), strconv.Itoa(iters))
			if err != nil {
				return err
			}
			out[mode] = kv["rtt_ns"] / 1000
		}
		return nil
	})
	return out, err
}

// cpuIdleConfig records how idle CPUs wait. A cross-core blocking round
// trip is mostly two wake-ups of an idle CPU, and in a guest whose idle
// CPUs halt without polling each one goes through the host (15-40 us on
// the project's VM, against 2-5 us for a context switch on one core).
func cpuIdleConfig(rep *benchkit.Report) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	driver := read("/sys/devices/system/cpu/cpuidle/current_driver")
	if driver == "" {
		driver = "none"
	}
	rep.SetConfig("cpuidle_driver", driver)
	if poll := read("/sys/module/haltpoll/parameters/guest_halt_poll_ns"); driver == "haltpoll" && poll != "" {
		rep.SetConfig("guest_halt_poll_ns", poll)
		if poll == "0" {
			rep.Note("rtt: idle CPUs halt without polling (cpuidle haltpoll, guest_halt_poll_ns 0), so every cross-core " +
				"blocking wake-up goes through the host; the _1core modes pay a context switch instead")
		}
	}
}
