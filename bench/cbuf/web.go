package cbufbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/plot"
)

// The web workload (issue #28): cbufweb against nginx and Apache with the
// same FastCGI application, under wrk (the paper's Figure 9), and cbufweb
// under an interfering allocator per pool policy (Figure 10).

// webParts are the web workload's experiments.
var webParts = []string{"servers", "send", "contention"}

var webSizes = []int{1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}

const (
	webConns   = 16 // wrk connections (the paper found 22 best for its setup)
	webThreads = 2  // wrk threads: one per core of the test machine
)

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// wrkResult is one wrk run.
type wrkResult struct {
	rps, p99ms   float64
	requests     float64
	errors       float64 // non-2xx responses and socket errors
	clientCPU    time.Duration
	serverCPU    time.Duration
	cpuPerReqUs  float64
	wrkCPUPerReq float64
}

var (
	wrkReqs    = regexp.MustCompile(`(\d+) requests in`)
	wrkRPS     = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkP99     = regexp.MustCompile(`\s99%\s+([\d.]+)(us|ms|s)`)
	wrkNon2xx  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSockErr = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// parseWrk reads wrk --latency output.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	m := wrkRPS.FindStringSubmatch(out)
	n := wrkReqs.FindStringSubmatch(out)
	p := wrkP99.FindStringSubmatch(out)
	if m == nil || n == nil || p == nil {
		return r, fmt.Errorf("unexpected wrk output:\n%s", out)
	}
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	r.requests, _ = strconv.ParseFloat(n[1], 64)
	r.p99ms, _ = strconv.ParseFloat(p[1], 64)
	switch p[2] {
	case "us":
		r.p99ms /= 1000
	case "s":
		r.p99ms *= 1000
	}
	if e := wrkNon2xx.FindStringSubmatch(out); e != nil {
		v, _ := strconv.ParseFloat(e[1], 64)
		r.errors += v
	}
	if e := wrkSockErr.FindStringSubmatch(out); e != nil {
		for _, s := range e[1:] {
			v, _ := strconv.ParseFloat(s, 64)
			r.errors += v
		}
	}
	return r, nil
}

// runWrk loads url for d and measures the server's CPU over the run.
func runWrk(ctx context.Context, srv *exampleServer, url string, d time.Duration) (wrkResult, error) {
	cmd := exec.CommandContext(ctx, "wrk", fmt.Sprintf("-t%d", webThreads), fmt.Sprintf("-c%d", webConns),
		fmt.Sprintf("-d%ds", int(d.Seconds())), "--latency", url)
	c0, err := srv.CPU()
	if err != nil {
		return wrkResult{}, err
	}
	out, err := cmd.Output()
	c1, cerr := srv.CPU()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	if cerr != nil {
		return wrkResult{}, cerr
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return r, err
	}
	r.serverCPU = c1 - c0
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.clientCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if r.requests > 0 {
		r.cpuPerReqUs = float64(r.serverCPU.Microseconds()) / r.requests
		r.wrkCPUPerReq = float64(r.clientCPU.Microseconds()) / r.requests
	}
	return r, nil
}

func webCacheDir() string { return filepath.Join(cbufCacheDir(), "web") }

// managerArgv is how the web bench starts a CBUF manager as its own process
// (so its CPU counts for cbufweb): this cistern binary's `cbuf manager`.
func managerArgv(extra ...string) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(filepath.Base(exe), "cistern") || strings.HasSuffix(exe, ".test") {
		return nil, fmt.Errorf("the web workload starts the CBUF manager as `%s cbuf manager`: run it from the cistern binary", exe)
	}
	return append([]string{exe, "cbuf", "manager"}, extra...), nil
}

// Web runs `cistern bench cbuf --workload web`.
func Web(ctx context.Context, opt Options) (*benchkit.Report, error) {
	if opt.Progress == nil {
		opt.Progress = func(string) {}
	}
	part := map[string]bool{}
	for _, p := range opt.Parts {
		if !slices.Contains(webParts, p) {
			return nil, fmt.Errorf("unknown part %q of the web workload (have %s)", p, strings.Join(webParts, ", "))
		}
		part[p] = true
	}
	if len(part) == 0 {
		for _, p := range webParts {
			part[p] = true
		}
	}
	for _, tool := range []string{"wrk", "nginx", "apache2", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is not installed: make deps (scripts/deps.sh) installs nginx, apache2, wrk, libfcgi-dev and gcc", tool)
		}
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the web workload starts nginx and Apache (workers as www-data) and cpu accounting groups: run as root")
	}
	rep := benchkit.New("cbuf", opt.Quick)
	rep.SetConfig("workload", "web")
	opt.Progress("building the cbufweb example (go build; it builds cbufweb and the FastCGI application)")
	prog, err := buildExample(ctx, webCacheDir())
	if err != nil {
		return nil, err
	}
	mgr, err := managerArgv("--memory", "512M")
	if err != nil {
		return nil, err
	}
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.SetConfig("loadavg_before", strings.TrimSpace(string(load)))
	}
	if part["servers"] || part["send"] {
		if err := webServers(ctx, rep, opt, prog, mgr, part); err != nil {
			return nil, err
		}
	}
	if part["contention"] {
		if err := webContention(ctx, rep, opt, prog); err != nil {
			return nil, err
		}
	}
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.SetConfig("loadavg_after", strings.TrimSpace(string(load)))
	}
	return rep, nil
}

type webServer struct {
	name  string
	srv   *exampleServer
	sizes []int
}

func webServers(ctx context.Context, rep *benchkit.Report, opt Options, prog string, mgr []string, part map[string]bool) error {
	dur := 5 * time.Second
	if opt.Quick {
		dur = 2 * time.Second
	}
	rounds := benchkit.Rounds(opt.Quick)
	rep.SetConfig("web_wrk", fmt.Sprintf("-t%d -c%d -d%ds --latency (keep-alive)", webThreads, webConns, int(dur.Seconds())))
	rep.SetConfig("web_rounds", rounds)
	rep.SetConfig("web_warmup_s", 1)
	rep.SetConfig("web_sizes", webSizes)
	rep.SetConfig("web_cbufweb_pairs", 2)
	rep.SetConfig("web_fcgi_processes", 2)
	rep.SetConfig("web_nginx_workers", 2)
	rep.SetConfig("web_apache_children", 2)
	var servers []*webServer
	defer func() {
		for _, s := range servers {
			s.srv.Stop()
		}
	}()
	start := func(name string, sizes []int, args ...string) error {
		opt.Progress("starting " + name)
		// serve builds the C programs first (cc: seconds on a loaded machine)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		s, err := startExample(sctx, prog, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		servers = append(servers, &webServer{name, s, sizes})
		return nil
	}
	// two processes serve in each: cbufweb's two front end + content pairs,
	// nginx's two workers, Apache's two children, each baseline's two
	// FastCGI processes
	o := func(server string, extra ...string) []string {
		args := append([]string{"--server", server, "--bins", webCacheDir(), "--group", "--pairs", "2"}, extra...)
		if server == "cbufweb" {
			args = append(append(args, "--"), mgr...)
		}
		return args
	}
	if part["servers"] {
		for _, name := range []string{"cbufweb", "nginx", "apache"} {
			if err := start(name, webSizes, o(name)...); err != nil {
				return err
			}
		}
	}
	if part["send"] {
		big := webSizes[2:]
		if !part["servers"] {
			if err := start("cbufweb", big, o("cbufweb")...); err != nil {
				return err
			}
		}
		for _, mode := range []string{"zerocopy", "splice"} {
			if err := start("cbufweb-"+mode, big, o("cbufweb", "--send", mode)...); err != nil {
				return err
			}
		}
	}
	// every server's answers are checked (size and checksum) before timing
	opt.Progress("checking every server's bodies")
	for _, s := range servers {
		for i, size := range s.sizes {
			url := fmt.Sprintf("%s/gen?size=%d&seed=%d", s.srv.URL, size, i+1)
			if err := checkBody(ctx, prog, url, size, uint64(i+1), strings.HasPrefix(s.name, "apache")); err != nil {
				return fmt.Errorf("%s answers wrong before timing: %w", s.name, err)
			}
		}
	}

	type cell struct {
		s    *webServer
		size int
	}
	var cells []string
	byName := map[string]cell{}
	for _, size := range webSizes {
		for _, s := range servers {
			if slices.Contains(s.sizes, size) {
				name := s.name + " " + sizeName(size)
				cells = append(cells, name)
				byName[name] = cell{s, size}
			}
		}
	}
	err := benchkit.Interleave(ctx, rounds, cells, opt.Progress, func(ctx context.Context, round int, mode string) error {
		c := byName[mode]
		url := fmt.Sprintf("%s/gen?size=%d&seed=%d", c.s.srv.URL, c.size, round)
		// one unmeasured second first: every server starts the round warm
		// (cbufweb's pools were resized by the policy while it idled)
		if _, err := runWrk(ctx, c.s.srv, url, time.Second); err != nil {
			return err
		}
		r, err := runWrk(ctx, c.s.srv, url, dur)
		if err != nil {
			return err
		}
		if r.errors > 0 {
			return fmt.Errorf("%s: %v errors or non-2xx answers under wrk", mode, r.errors)
		}
		rep.Sample(mode, "req_per_sec", r.rps)
		rep.Sample(mode, "p99_ms", r.p99ms)
		rep.Sample(mode, "cpu_us_per_req", r.cpuPerReqUs)
		rep.Sample(mode, "wrk_cpu_us_per_req", r.wrkCPUPerReq)
		rep.Sample(mode, "MB_per_sec", r.rps*float64(c.size)/1e6)
		return nil
	})
	if err != nil {
		return err
	}
	rep.Section("servers under wrk (Figure 9): median [min-max] of interleaved rounds", cells,
		[]string{"req_per_sec", "p99_ms", "cpu_us_per_req", "wrk_cpu_us_per_req", "MB_per_sec"})
	if part["servers"] {
		webRatios(rep, rounds)
		if opt.PlotPath != "" {
			if err := webPlot(rep, opt.PlotPath); err != nil {
				return err
			}
		}
	}
	if part["send"] {
		for _, size := range webSizes[2:] {
			for _, mode := range []string{"zerocopy", "splice"} {
				rep.PairedRatio(fmt.Sprintf("web_%s_vs_writev_%s_req", mode, sizeName(size)),
					"cbufweb-"+mode+" "+sizeName(size), "req_per_sec", "cbufweb "+sizeName(size), "req_per_sec")
			}
		}
	}
	return nil
}

// webRatios: cbufweb against the better baseline, round by round.
func webRatios(rep *benchkit.Report, rounds int) {
	for _, size := range webSizes {
		sn := sizeName(size)
		cr := rep.Samples("cbufweb "+sn, "req_per_sec")
		nr, ar := rep.Samples("nginx "+sn, "req_per_sec"), rep.Samples("apache "+sn, "req_per_sec")
		cc := rep.Samples("cbufweb "+sn, "cpu_us_per_req")
		nc, ac := rep.Samples("nginx "+sn, "cpu_us_per_req"), rep.Samples("apache "+sn, "cpu_us_per_req")
		for i := range min(len(cr), len(nr), len(ar), rounds) {
			rep.SampleRatio("web_cbufweb_vs_best_req_"+sn, cr[i]/math.Max(nr[i], ar[i]))
			rep.SampleRatio("web_cbufweb_vs_nginx_req_"+sn, cr[i]/nr[i])
			rep.SampleRatio("web_cbufweb_vs_apache_req_"+sn, cr[i]/ar[i])
			rep.SampleRatio("web_cbufweb_vs_least_cpu_per_req_"+sn, cc[i]/math.Min(nc[i], ac[i]))
		}
		switch {
		case size >= 64<<10:
			rep.TargetRatio("web_cbufweb_vs_best_req_"+sn, ">=", 1.5)
			rep.TargetRatio("web_cbufweb_vs_least_cpu_per_req_"+sn, "<=", 1)
		case size == 1<<10:
			rep.TargetRatio("web_cbufweb_vs_best_req_"+sn, ">=", 0.8)
		}
	}
	rep.Note("wrk runs on the same machine as the servers: its CPU per request is in wrk_cpu_us_per_req; on two cores it bounds how far a cheaper server can pull ahead")
}

// webPlot draws requests/s and CPU per request against payload size for
// each server (the paper's Figure 9).
func webPlot(rep *benchkit.Report, path string) error {
	var groups []string
	for _, size := range webSizes {
		groups = append(groups, sizeName(size))
	}
	bars := func(metric string, scale float64) []plot.BarSeries {
		var out []plot.BarSeries
		for _, name := range []string{"cbufweb", "nginx", "apache"} {
			s := plot.BarSeries{Name: name}
			for _, size := range webSizes {
				med, lo, hi, _ := rep.Spread(name+" "+sizeName(size), metric)
				s.Values = append(s.Values, med*scale)
				s.Lo = append(s.Lo, lo*scale)
				s.Hi = append(s.Hi, hi*scale)
			}
			out = append(out, s)
		}
		return out
	}
	if err := plot.BarChart(path, "Web servers under wrk (-c16), FastCGI baselines ("+rep.Kernel()+")", "MB/s of response bodies", groups, bars("MB_per_sec", 1)); err != nil {
		return err
	}
	base := strings.TrimSuffix(path, filepath.Ext(path))
	if err := plot.BarChart(base+"-rps.png", "Requests per second by payload size", "requests/s", groups, bars("req_per_sec", 1)); err != nil {
		return err
	}
	return plot.BarChart(base+"-cpu.png", "Server CPU per request (all its processes)", "CPU µs per request", groups, bars("cpu_us_per_req", 1))
}

// ---- memory contention (Figure 10) ----

// contention phases in seconds: undisturbed, interferer ramping up,
// at its peak, falling back, after it ends.
type webPhase struct{ quiet, ramp, plateau, fall, after float64 }

func (p webPhase) end() float64 { return p.quiet + p.ramp + p.plateau + p.fall }

func (p webPhase) demand(t float64) int {
	switch {
	case t < p.quiet:
		return 0
	case t < p.quiet+p.ramp:
		return 5 + int((t-p.quiet)/p.ramp*float64(webIfPeak-5))
	case t < p.quiet+p.ramp+p.plateau:
		return webIfPeak
	case t < p.end():
		return 10
	}
	return 0
}

const (
	webContMemory = 1024 // pages for all pools
	webIfPeak     = 900  // interferer's peak demand (held 1-page buffers)
	webContSize   = 64 << 10
	webIfOps      = 2000 // interferer alloc+free pairs per 10 ms period
	webQosPct     = 25.0 // the web server's blocked-time target under qos (the paper's)
)

func webContention(ctx context.Context, rep *benchkit.Report, opt Options, prog string) error {
	ph := webPhase{6, 6, 10, 5, 3}
	if opt.Quick {
		ph = webPhase{4, 3, 6, 4, 2}
	}
	rep.SetConfig("contention_memory_pages", webContMemory)
	rep.SetConfig("contention_interferer_peak_pages", webIfPeak)
	rep.SetConfig("contention_payload", sizeName(webContSize))
	rep.SetConfig("contention_phases_s", []float64{ph.quiet, ph.ramp, ph.plateau, ph.fall, ph.after})
	rep.SetConfig("contention_qos_target_pct", webQosPct)
	var charts []string
	pols := policies
	if s := os.Getenv("CISTERN_WEB_POLICIES"); s != "" { // debugging one policy
		pols = strings.Split(s, ",")
	}
	for _, pol := range pols {
		opt.Progress(fmt.Sprintf("contention under %s (%.0f s)", pol, ph.end()+ph.after))
		series, err := webContentionRun(ctx, rep, prog, pol, ph)
		if err != nil {
			return fmt.Errorf("contention %s: %w", pol, err)
		}
		if opt.PlotPath != "" {
			base := strings.TrimSuffix(opt.PlotPath, filepath.Ext(opt.PlotPath))
			p := fmt.Sprintf("%s-contention-%s.png", base, pol)
			if err := plot.LineChart(p, fmt.Sprintf("cbufweb %s under an interfering allocator, policy %s", sizeName(webContSize), pol),
				"seconds", "% (throughput of undisturbed; pools of all memory)", series); err != nil {
				return err
			}
			charts = append(charts, p)
		}
	}
	if med, ok := rep.Get("contention_max-throughput", "recovered_ratio"); ok {
		rep.Target("web_contention_max-throughput_recovered", med.(float64), ">=", 0.8)
	}
	var rows []string
	for _, pol := range pols {
		rows = append(rows, "contention_"+pol)
	}
	rep.Section("memory contention (Figure 10): cbufweb "+sizeName(webContSize)+" req/s while an allocator interferes", rows,
		[]string{"undisturbed_req_per_sec", "ramp_req_per_sec", "peak_last3s_req_per_sec", "before_end_3s_req_per_sec", "after_req_per_sec",
			"peak_ratio", "recovered_ratio", "lowest_ratio", "interferer_pool_max_pages", "content_pool_min_pages"})
	return nil
}

func webContentionRun(ctx context.Context, rep *benchkit.Report, prog string, pol string, ph webPhase) ([]plot.Series, error) {
	dir, err := os.MkdirTemp("", "cistern-bench-web-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "cbuf.sock")
	m, err := cbuf.NewManager(cbuf.ManagerOptions{Socket: sock, Memory: webContMemory * cbuf.PageSize, Policy: pol})
	if err != nil {
		return nil, err
	}
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan struct{})
	go func() { m.Run(mctx); close(mdone) }()
	defer func() { mcancel(); <-mdone }()
	args := []string{"--server", "cbufweb", "--bins", webCacheDir(), "--dir", filepath.Join(dir, "web"), "--cbuf", sock, "--metrics"}
	switch pol {
	case "priority":
		args = append(args, "--env", "CBUF_PRIORITY=10")
	case "qos":
		args = append(args, "--env", fmt.Sprintf("CBUF_QOS=%g", webQosPct))
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	srv, err := startExample(sctx, prog, args...)
	cancel()
	if err != nil {
		return nil, err
	}
	defer srv.Stop()

	total := ph.end() + ph.after
	wrk := exec.CommandContext(ctx, "wrk", fmt.Sprintf("-t%d", webThreads), fmt.Sprintf("-c%d", webConns),
		fmt.Sprintf("-d%ds", int(math.Ceil(total))+1), fmt.Sprintf("%s/gen?size=%d", srv.URL, webContSize))
	wrk.Stdout, wrk.Stderr = io.Discard, io.Discard
	if err := wrk.Start(); err != nil {
		return nil, err
	}
	defer func() { wrk.Process.Kill(); wrk.Wait() }()

	// the interferer: a CBUF component holding demand(t) 1-page buffers and
	// cycling webIfOps of them every 10 ms
	ifc, err := cbuf.ConnectWith(sock, cbuf.ClientOptions{Name: "interferer", Priority: 1})
	if err != nil {
		return nil, err
	}
	ifDone, ifStop := make(chan struct{}), make(chan struct{})
	t0 := time.Now()
	go func() {
		defer close(ifDone)
		var held []cbuf.ID
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for k := 0; ; {
			select {
			case <-ctx.Done():
				return
			case <-ifStop:
				return
			case <-tick.C:
			}
			t := time.Since(t0).Seconds()
			if t > ph.end() {
				break
			}
			want := ph.demand(t)
			for len(held) < want {
				_, id, err := ifc.Alloc(cbuf.PageSize)
				if err != nil {
					break
				}
				held = append(held, id)
			}
			for len(held) > want {
				ifc.Free(held[len(held)-1])
				held = held[:len(held)-1]
			}
			for i := 0; i < webIfOps && len(held) > 0; i++ {
				j := k % len(held)
				k++
				ifc.Free(held[j])
				_, id, err := ifc.Alloc(cbuf.PageSize)
				if err != nil {
					held = append(held[:j], held[j+1:]...)
					continue
				}
				held[j] = id
			}
		}
		for _, id := range held {
			ifc.Free(id)
		}
	}()
	// An allocation the policy cannot satisfy blocks in the manager: at
	// the end the interferer is told to stop, and if it is still blocked,
	// ending the manager releases it.
	defer func() {
		close(ifStop)
		select {
		case <-ifDone:
		case <-time.After(3 * time.Second):
			mcancel()
			<-ifDone
		}
		ifc.Close()
	}()

	// sample throughput and the pools every 500 ms (two policy periods)
	type sample struct{ t, rps, content, front, intf, blocked float64 }
	var samples []sample
	last, lastT := webCount(srv.MetricsURL), time.Now()
	for time.Since(t0).Seconds() < total {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		now, n := time.Now(), webCount(srv.MetricsURL)
		s := sample{t: now.Sub(t0).Seconds(), rps: (n - last) / now.Sub(lastT).Seconds()}
		last, lastT = n, now
		if st, err := cbuf.QueryStats(sock); err == nil {
			for _, c := range st.Components {
				switch c.Name {
				case "cbufweb-content":
					s.content = float64(c.PoolPages)
					s.blocked = c.BlockedPct
				case "cbufweb-front":
					s.front = float64(c.PoolPages)
				case "interferer":
					s.intf = float64(c.PoolPages)
				}
			}
		}
		samples = append(samples, s)
	}
	median := func(lo, hi float64) float64 {
		var xs []float64
		for _, s := range samples {
			if s.t >= lo && s.t < hi {
				xs = append(xs, s.rps)
			}
		}
		if len(xs) == 0 {
			return math.NaN()
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	mode := "contention_" + pol
	base := median(1, ph.quiet)
	peakEnd := ph.quiet + ph.ramp + ph.plateau
	// recovered: the last 3 s before the interferer ends (its demand is
	// back to 10 pages, it still allocates), as in the paper's Figure 10
	rec := median(ph.end()-3, ph.end())
	peak := median(peakEnd-3, peakEnd)
	rep.Set(mode, "undisturbed_req_per_sec", base)
	rep.Set(mode, "ramp_req_per_sec", median(ph.quiet, ph.quiet+ph.ramp))
	rep.Set(mode, "peak_last3s_req_per_sec", peak)
	rep.Set(mode, "before_end_3s_req_per_sec", rec)
	rep.Set(mode, "after_req_per_sec", median(ph.end(), total))
	rep.Set(mode, "peak_ratio", peak/base)
	rep.Set(mode, "recovered_ratio", rec/base)
	minRatio := math.Inf(1)
	for _, s := range samples {
		if s.t >= ph.quiet && s.t < peakEnd && base > 0 {
			minRatio = math.Min(minRatio, s.rps/base)
		}
	}
	rep.Set(mode, "lowest_ratio", minRatio)
	var maxIf, minContent float64 = 0, math.Inf(1)
	for _, s := range samples {
		if s.t >= ph.quiet && s.t < peakEnd {
			maxIf = math.Max(maxIf, s.intf)
			minContent = math.Min(minContent, s.content)
		}
	}
	rep.Set(mode, "interferer_pool_max_pages", maxIf)
	rep.Set(mode, "content_pool_min_pages", minContent)
	if trace := os.Getenv("CBUF_POLICY_TRACE"); trace == "1" {
		for _, s := range samples {
			fmt.Fprintf(os.Stderr, "%s t=%.2f rps=%.0f content=%.0f front=%.0f interferer=%.0f blocked=%.1f%%\n", pol, s.t, s.rps, s.content, s.front, s.intf, s.blocked)
		}
	}
	// chart: throughput in % of undisturbed; pools in % of all memory;
	// the interferer's demand; its start and end as vertical marks
	var thr, cpool, ipool, dem plot.Series
	thr.Name, cpool.Name, ipool.Name, dem.Name = "throughput % of undisturbed", "content pool % (policy)", "interferer pool % (policy)", "interferer demand %"
	for _, s := range samples {
		thr.X, thr.Y = append(thr.X, s.t), append(thr.Y, 100*s.rps/base)
		cpool.X, cpool.Y = append(cpool.X, s.t), append(cpool.Y, 100*s.content/webContMemory)
		ipool.X, ipool.Y = append(ipool.X, s.t), append(ipool.Y, 100*s.intf/webContMemory)
		dem.X, dem.Y = append(dem.X, s.t), append(dem.Y, 100*float64(ph.demand(s.t))/webContMemory)
	}
	marks := plot.Series{Name: "interferer runs", X: []float64{ph.quiet, ph.quiet, ph.end(), ph.end()}, Y: []float64{0, 130, 130, 0}}
	return []plot.Series{thr, cpool, ipool, dem, marks}, nil
}

// webCount reads cbufweb's 200 responses from its metrics.
func webCount(url string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return math.NaN()
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, `cbufweb_responses_total{code="200"} `) {
			v, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return v
		}
	}
	return math.NaN()
}
