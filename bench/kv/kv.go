package kvbench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/kvgen"
	"github.com/cistern-ebpf/cistern/internal/loadgen"
	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/kernel"
	"github.com/cistern-ebpf/cistern/kv"
)

// Modes are the server modes, in order: memcached alone, one fixed slot of
// 128 or 1024 bytes per key, and Kerby-KV's pool. The bare XDP_TX
// reflector (the path's ceiling) runs beside them with the kernel
// generator.
var Modes = []string{"vanilla", "fixed128", "fixed1024", "kerby"}

// Options configure the Kerby-KV benchmark.
type Options struct {
	Quick bool
	Keys  int           // distinct keys (default 100000; quick 20000)
	Phase time.Duration // one user-space client phase (default 5s; quick 2s)
	// GenPhase is one kernel-generator phase (default 3s; quick 2s: at 1s
	// one round in three could put kerby 20% off fixed1024).
	GenPhase time.Duration
	Rounds   int // interleaved rounds (default 5; quick 3)
	Workers  int
	Depth    int      // outstanding requests per worker (loadgen default 32)
	Batch    int      // datagrams per sendmmsg/recvmmsg (loadgen default 16)
	Modes    []string // subset of Modes
	Skews    []float64
	// Clients: "kernel" (the XDP live-frame generator, internal/kvgen),
	// "user-space" (internal/loadgen, UDP) and "tcp" (tcpLoad: GETs on
	// memcached's TCP connections, rows "tcp vanilla" and "tcp kerby");
	// default all three.
	Clients []string
	// TCPConns and TCPDepth shape the TCP client: connections, and GETs
	// written at once on each before it reads their replies (default 16
	// and 4).
	TCPConns, TCPDepth int
	// TCPHits is the share of the TCP client's GETs for preloaded keys
	// (default 0.9, the hit ratio); the others ask for keys no one
	// sets, which every mode answers with END.
	TCPHits float64
	// Native attaches XDP in driver mode for the user-space client rows too.
	// On veth it is slower than generic there (every skb is converted to an
	// XDP frame and back); the kernel generator always uses native.
	Native   bool
	PlotPath string            // optional PNG of throughput per mode, with the rounds' spread
	Live     func(line string) // optional: one line per second while a user-space phase runs
	Progress func(step string) // optional: announces each step
}

func (o *Options) defaults() {
	if o.Keys == 0 {
		o.Keys = 100000
		if o.Quick {
			o.Keys = 20000
		}
	}
	if o.Phase == 0 {
		o.Phase = 5 * time.Second
		if o.Quick {
			o.Phase = 2 * time.Second
		}
	}
	if o.GenPhase == 0 {
		o.GenPhase = 3 * time.Second
		if o.Quick {
			o.GenPhase = 2 * time.Second
		}
	}
	if o.Rounds == 0 {
		o.Rounds = benchkit.Rounds(o.Quick)
	}
	if o.Workers == 0 {
		o.Workers = 2 // one per core
	}
	if len(o.Modes) == 0 {
		o.Modes = Modes
	}
	if len(o.Skews) == 0 {
		o.Skews = []float64{0.9, 0.99}
		if o.Quick {
			o.Skews = []float64{0.99}
		}
	}
	if len(o.Clients) == 0 {
		o.Clients = []string{"kernel", "user-space", "tcp"}
	}
	if o.TCPConns == 0 {
		o.TCPConns = tcpConns
	}
	if o.TCPDepth == 0 {
		o.TCPDepth = tcpDepth
	}
	if o.TCPHits == 0 {
		o.TCPHits = 0.9
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
}

func kvConfig(mode string, keys int) (kv.Config, bool) {
	// Pools sized to hold the whole working set with room to spare: the
	// comparison is about layout, not about eviction. TCP: the bench
	// measures the TCP path too (its tcp rows).
	mb := uint32(keys*400/(1<<20)) + 8
	switch mode {
	case "kerby":
		return kv.Config{Mode: kv.ModeKerby, BlockSize: 128, MaxBlocks: 8, PoolMB: mb, MaxObjects: uint32(keys * 2), TCP: true}, true
	case "fixed128":
		return kv.Config{Mode: kv.ModeFixed, SlotSize: 128, PoolMB: mb, MaxObjects: uint32(keys * 2), TCP: true}, true
	case "fixed1024":
		return kv.Config{Mode: kv.ModeFixed, SlotSize: 1024, PoolMB: uint32(keys*1024*2/(1<<20)) + 8, MaxObjects: uint32(keys * 2), TCP: true}, true
	}
	return kv.Config{}, false
}

type phase struct {
	name     string
	skew     float64
	getRatio float64
}

const (
	headline  = "get_0.99"
	userRow   = "user-space "
	reflector = "reflector"
)

// kvBench is one run's shared state: the namespaces, memcached, a loaded
// Kerby-KV per kernel mode, the generators.
type kvBench struct {
	opt      Options
	rep      *benchkit.Report
	pair     *netenv.Pair
	mc       *servers.Memcached
	srv      map[string]*kv.Server
	gen      *kvgen.Gen // nil without the kernel generator
	clients  map[float64]*loadgen.Client
	zipf     zipfTable // the TCP client's key popularity
	tcpModes []string  // the modes with TCP rows in this run
	phase    string    // for the live line
	cur      string    // the mode running, for the live line
	mcNoted  bool      // the read counter's failure is in the notes
}

// Run runs the Kerby-KV benchmark and returns its report. Modes run
// interleaved, round after round, against one memcached: the XDP program
// of each mode is attached for its turn only (each Kerby-KV instance was
// filled once and keeps its values while detached).
func Run(ctx context.Context, opt Options) (*benchkit.Report, error) {
	opt.defaults()
	rep := benchkit.New("kv", opt.Quick)
	rep.SetConfig("keys", opt.Keys)
	rep.SetConfig("key_bytes", 8)
	rep.SetConfig("values", "75% 128 B, 25% 1024 B")
	rep.SetConfig("rounds", opt.Rounds)
	rep.SetConfig("user_phase_seconds", opt.Phase.Seconds())
	rep.SetConfig("kernel_phase_seconds", opt.GenPhase.Seconds())
	rep.SetConfig("workers", opt.Workers)
	rep.SetConfig("depth", max(opt.Depth, 32)) // loadgen's default is 32
	rep.SetConfig("user_space_xdp", map[bool]string{true: "native", false: "generic (veth; see --native)"}[opt.Native])
	rep.SetConfig("skews", opt.Skews)
	if slices.Contains(opt.Clients, "tcp") {
		rep.SetConfig("tcp_conns", opt.TCPConns)
		rep.SetConfig("tcp_depth", opt.TCPDepth)
		rep.SetConfig("tcp_hits", opt.TCPHits)
	}
	rep.Headline("mops_per_sec", "mops_per_server_core", "p99_us", "memory_efficiency", "wrong_values")

	// A queue per CPU: each generator thread's requests, the server's XDP
	// and the reply counter then run on that thread's CPU, side by side.
	pair, err := netenv.NewPair("kvb", netenv.Options{Subnet: 240, Queues: runtime.NumCPU()})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	// XDP_TX replies carry no UDP checksum: the client end must not offload it.
	if out, err := netenv.Command(pair.ClientNSName(), "ethtool", "-K", pair.ClientIf, "tx", "off").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ethtool -K %s tx off: %v: %s", pair.ClientIf, err, out)
	}
	rep.SetConfig("veth", pair.ServerIf+" <-> "+pair.ClientIf)

	b := &kvBench{opt: opt, rep: rep, pair: pair, srv: map[string]*kv.Server{}, clients: map[float64]*loadgen.Client{}}
	defer b.close()
	if err := b.setup(ctx); err != nil {
		return nil, err
	}

	// The steps of a round: kernel generator rows, then user-space rows.
	var steps []string
	if b.gen != nil {
		for _, m := range append(slices.Clone(opt.Modes), reflector) {
			steps = append(steps, m)
		}
	}
	if slices.Contains(opt.Clients, "user-space") {
		for _, sk := range opt.Skews {
			for _, m := range opt.Modes {
				steps = append(steps, userStep(m, sk))
			}
		}
	}
	if slices.Contains(opt.Clients, "tcp") {
		b.zipf = newZipf(opt.Keys, 0.99)
		for _, m := range tcpModes {
			if slices.Contains(opt.Modes, m) {
				b.tcpModes = append(b.tcpModes, m)
			}
		}
		if len(b.tcpModes) > 0 {
			steps = append(steps, tcpStep)
		}
	}
	err = benchkit.Interleave(ctx, opt.Rounds, steps, opt.Progress, func(ctx context.Context, round int, step string) error {
		if step == tcpStep {
			return b.tcpRound(ctx, round, b.tcpModes)
		}
		if mode, sk, ok := parseUserStep(step); ok {
			return b.userRound(ctx, mode, phase{phaseName("get", sk), sk, 1})
		}
		return b.genRound(ctx, step)
	})
	if err != nil {
		return nil, err
	}
	// The mixed phase writes, so the modes' kernel copies would disagree
	// with memcached in later rounds: one run per mode, after the rounds,
	// each after a fresh preload through that mode.
	if slices.Contains(opt.Clients, "user-space") && !opt.Quick {
		last := opt.Skews[len(opt.Skews)-1]
		for _, m := range opt.Modes {
			if err := b.mixRun(ctx, m, phase{phaseName("mix95", last), last, 0.95}); err != nil {
				return nil, fmt.Errorf("%s mix95: %w", m, err)
			}
		}
	}
	if err := b.memoryFigures(); err != nil {
		return nil, err
	}
	b.targets()
	b.tcpTargets()
	if opt.PlotPath != "" {
		if err := plotKV(rep, opt.PlotPath, opt.Modes, opt.Skews, b.gen != nil); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func phaseName(kind string, sk float64) string { return fmt.Sprintf("%s_%g", kind, sk) }

func userStep(mode string, sk float64) string { return fmt.Sprintf("%s%s@%g", userRow, mode, sk) }

func parseUserStep(step string) (mode string, sk float64, ok bool) {
	rest, ok := strings.CutPrefix(step, userRow)
	if !ok {
		return "", 0, false
	}
	mode, skew, _ := strings.Cut(rest, "@")
	sk, err := strconv.ParseFloat(skew, 64)
	return mode, sk, err == nil
}

// userRowName is the report row of a user-space phase: the headline phase
// under "user-space MODE", the others as "user-space MODE PHASE".
func userRowName(mode, ph string) string {
	if ph == headline {
		return userRow + mode
	}
	return userRow + mode + " " + ph
}

// setup starts memcached, loads and fills every kernel mode, loads the
// kernel generator and opens the user-space clients.
func (b *kvBench) setup(ctx context.Context) error {
	opt, pair := b.opt, b.pair
	opt.Progress("starting memcached")
	var err error
	b.mc, err = servers.StartMemcached(servers.MemcachedOptions{
		Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: 11211, Threads: 2, MemoryMB: 1024,
	})
	if err != nil {
		return err
	}
	for _, m := range opt.Modes {
		b.rep.Set(m, "mops_per_sec", 0.0) // rows in mode order
	}
	// Fill each kernel mode through its own XDP program; the values are
	// the same every time (a fresh client writes version 1 of each key).
	preloadThrough := append([]string(nil), "")
	for _, m := range opt.Modes {
		if _, ok := kvConfig(m, opt.Keys); ok {
			preloadThrough = append(preloadThrough, m)
		}
	}
	if len(preloadThrough) > 1 {
		preloadThrough = preloadThrough[1:]
	}
	for _, m := range preloadThrough {
		if cfg, ok := kvConfig(m, opt.Keys); ok {
			opt.Progress(fmt.Sprintf("%s: loading Kerby-KV", m))
			srv, err := kv.Load(cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			b.srv[m] = srv
		}
		opt.Progress(fmt.Sprintf("preloading %d keys through %s", opt.Keys, map[bool]string{true: m, false: "memcached"}[m != ""]))
		if err := b.withServer(m, false, func() error { return b.preload(ctx, 0.99, nil) }); err != nil {
			return fmt.Errorf("preload %s: %w", m, err)
		}
	}
	if slices.Contains(opt.Clients, "kernel") {
		if err := kernel.XDPLiveFrames(); err != nil {
			b.rep.Note(fmt.Sprintf("kernel load generator unavailable (%v): the figures come from the user-space client only", err))
		} else {
			b.gen, err = kvgen.Load(kvgen.Config{
				Keys: opt.Keys, Skew: 0.99, Seed: 1, ValueSize: loadgen.DefaultValueSize,
				ClientMAC: pair.ClientMAC, ServerMAC: pair.ServerMAC, ClientIP: pair.ClientIP, ServerIP: pair.ServerIP,
			})
			if err != nil {
				return err
			}
			b.rep.Set(reflector, "mops_per_sec", 0.0)
		}
	}
	if slices.Contains(opt.Clients, "user-space") {
		for _, sk := range opt.Skews {
			var c *loadgen.Client
			err := netenv.Do(pair.ClientNS, func() (err error) {
				c, err = loadgen.New(b.loadgenConfig(sk, liveLine(opt.Live, b, &b.phase)))
				return err
			})
			if err != nil {
				return err
			}
			b.clients[sk] = c
		}
	}
	return nil
}

func (b *kvBench) loadgenConfig(sk float64, progress func(uint64)) loadgen.Config {
	return loadgen.Config{
		Server: mcUDPAddr(b.pair), Workers: b.opt.Workers, Depth: b.opt.Depth, Batch: b.opt.Batch,
		Keys: b.opt.Keys, Skew: sk, ValueSize: loadgen.DefaultValueSize, Seed: 1, Progress: progress,
	}
}

// preload sets every key at version 1 with a fresh client; then, when
// mix is set, runs the mixed phase on that client.
func (b *kvBench) preload(ctx context.Context, sk float64, mix func(*loadgen.Client) error) error {
	var c *loadgen.Client
	err := netenv.Do(b.pair.ClientNS, func() (err error) {
		c, err = loadgen.New(b.loadgenConfig(sk, nil))
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Preload(ctx); err != nil {
		return err
	}
	if mix != nil {
		return mix(c)
	}
	return nil
}

// withServer attaches the mode's XDP program to the server's veth (native
// for the kernel generator), runs fn, and detaches. "" and "vanilla" attach
// nothing for the user-space client and XDP_PASS for the generator;
// "reflector" the bare reflector.
func (b *kvBench) withServer(mode string, forGen bool, fn func() error) error {
	pair := b.pair
	var detach func() error
	err := netenv.Do(pair.ServerNS, func() error {
		if srv, ok := b.srv[mode]; ok {
			xm := kv.XDPGeneric
			if forGen || b.opt.Native {
				xm = kv.XDPNative
			}
			if err := srv.Attach(pair.ServerIfindex, xm); err != nil {
				return err
			}
			detach = func() error { return netenv.Do(pair.ServerNS, srv.Detach) }
			return nil
		}
		if !forGen {
			return nil
		}
		var l link.Link
		var err error
		if mode == reflector {
			l, err = b.gen.AttachReflector(pair.ServerIfindex)
		} else {
			l, err = b.gen.AttachPass(pair.ServerIfindex)
		}
		if l != nil {
			detach = l.Close
		}
		return err
	})
	if err != nil {
		return err
	}
	// A native program on the server end needs one on the client end to
	// deliver its XDP_TX frames: the generator's counter, or XDP_PASS.
	var peer link.Link
	if forGen {
		err = netenv.Do(pair.ClientNS, func() (err error) { peer, err = b.gen.AttachCounter(pair.ClientIfindex); return err })
	} else if srv, ok := b.srv[mode]; ok && srv.XDPMode == "native" {
		err = netenv.Do(pair.ClientNS, func() (err error) { peer, err = srv.AttachPeerPass(pair.ClientIfindex); return err })
	}
	if err == nil {
		err = fn()
	}
	if peer != nil {
		err = errors.Join(err, peer.Close())
	}
	if detach != nil {
		err = errors.Join(err, detach())
	}
	return err
}

// genRound is one kernel-generator phase of a mode.
func (b *kvBench) genRound(ctx context.Context, mode string) error {
	return b.withServer(mode, true, func() error {
		var before map[string]uint64
		srv := b.srv[mode]
		if srv != nil {
			before, _ = srv.Counters()
		}
		cpu0, srv0 := benchkit.SystemCPU(), serverCPU(b.mc.Pid())
		res, err := b.gen.Run(ctx, kvgen.RunOptions{
			Ifindex: b.pair.ClientIfindex, Duration: b.opt.GenPhase,
			InNS: func(fn func() error) error { return netenv.Do(b.pair.ClientNS, fn) },
		})
		if err != nil {
			return err
		}
		cpu, scpu := benchkit.SystemCPU()-cpu0, serverCPU(b.mc.Pid())-srv0
		r, rep := mode, b.rep
		rep.Sample(r, "mops_per_sec", res.OpsPerSec/1e6)
		if scpu > 0 {
			rep.Sample(r, "mops_per_server_core", float64(res.Replies)/scpu.Seconds()/1e6)
		}
		// The histogram's buckets are a quarter octave wide: whole µs suffice.
		rep.Sample(r, "p50_us", math.Round(float64(res.P50.Nanoseconds())/1e3))
		rep.Sample(r, "p99_us", math.Round(float64(res.P99.Nanoseconds())/1e3))
		rep.Sample(r, "wrong_values", float64(res.Wrong))
		rep.Sample(r, "sent_mpps", float64(res.Sent)/res.Elapsed.Seconds()/1e6)
		rep.Sample(r, "replies_per_request", float64(res.Replies)/max(float64(res.Sent), 1))
		if res.Replies > 0 {
			rep.Sample(r, "value_hit_ratio", float64(res.Hits)/float64(res.Replies))
			rep.Sample(r, "cpu_us_per_op", cpu.Seconds()*1e6/float64(res.Replies))
		}
		if srv != nil {
			rep.Sample(r, "kernel_hit_ratio", hitRatio(srv, before))
		}
		return nil
	})
}

// userRound is one user-space client phase of a mode.
func (b *kvBench) userRound(ctx context.Context, mode string, ph phase) error {
	return b.withServer(mode, false, func() error {
		b.phase, b.cur = ph.name, mode
		return b.userPhase(ctx, b.clients[ph.skew], mode, ph, true)
	})
}

// mixRun preloads through the mode, then runs the mixed phase once.
func (b *kvBench) mixRun(ctx context.Context, mode string, ph phase) error {
	b.opt.Progress(fmt.Sprintf("%s: %s (one run, after a fresh preload)", mode, ph.name))
	return b.withServer(mode, false, func() error {
		b.phase = ph.name
		return b.preload(ctx, ph.skew, func(c *loadgen.Client) error { return b.userPhase(ctx, c, mode, ph, false) })
	})
}

func (b *kvBench) userPhase(ctx context.Context, c *loadgen.Client, mode string, ph phase, sample bool) error {
	srv := b.srv[mode]
	var before map[string]uint64
	if srv != nil {
		before, _ = srv.Counters()
	}
	cpu0, srv0 := benchkit.SystemCPU(), serverCPU(b.mc.Pid())
	res, err := c.RunPhase(ctx, loadgen.Phase{GetRatio: ph.getRatio, Duration: b.opt.Phase})
	if err != nil {
		return err
	}
	cpu, scpu := benchkit.SystemCPU()-cpu0, serverCPU(b.mc.Pid())-srv0
	row := userRowName(mode, ph.name)
	put := b.rep.Sample
	if !sample {
		put = func(m, k string, v float64) { b.rep.Set(m, k, v) }
	}
	put(row, "mops_per_sec", res.OpsPerSec/1e6)
	if scpu > 0 && res.Ops > 0 {
		put(row, "mops_per_server_core", float64(res.Ops)/scpu.Seconds()/1e6)
	}
	put(row, "p50_us", float64(res.P50.Nanoseconds())/1e3)
	put(row, "p99_us", float64(res.P99.Nanoseconds())/1e3)
	put(row, "wrong_values", float64(res.WrongValues))
	put(row, "stale_values", float64(res.StaleValues))
	put(row, "lost_replies", float64(res.Lost))
	if res.Ops > 0 {
		put(row, "cpu_us_per_op", cpu.Seconds()*1e6/float64(res.Ops))
		put(row, "server_cpu_us_per_op", scpu.Seconds()*1e6/float64(res.Ops))
	}
	if srv != nil {
		put(row, "kernel_hit_ratio", hitRatio(srv, before))
	}
	return nil
}

func hitRatio(srv *kv.Server, before map[string]uint64) float64 {
	after, _ := srv.Counters()
	hits := float64(after["hits"] - before["hits"])
	miss := float64(after["misses"] - before["misses"])
	if hits+miss == 0 {
		return 0
	}
	return hits / (hits + miss)
}

// memoryFigures records each kernel mode's pool figures (fixed by the
// preload, so no rounds).
func (b *kvBench) memoryFigures() error {
	for _, m := range b.opt.Modes {
		srv, ok := b.srv[m]
		if !ok {
			continue
		}
		st, err := srv.Stats()
		if err != nil {
			return err
		}
		for _, row := range []string{m, userRow + m} {
			if _, ok := b.rep.Get(row, "mops_per_sec"); !ok {
				continue
			}
			b.rep.Set(row, "memory_efficiency", st.Pool.MemoryEfficiency)
			b.rep.Set(row, "kernel_value_bytes", float64(st.Pool.LiveBlocks)*float64(st.Pool.BlockSize))
			b.rep.Set(row, "leaked_blocks", float64(st.Pool.LeakedBlocks))
		}
	}
	return nil
}

// targets computes the ratios, round by round, and judges their medians:
// on the kernel generator's rows when it ran, else on the user-space ones.
func (b *kvBench) targets() {
	rep := b.rep
	row := func(m string) string { return m }
	if b.gen == nil {
		row = func(m string) string { return userRow + m }
	}
	has := func(m string) bool {
		_, ok := rep.Get(row(m), "mops_per_sec")
		return ok && len(rep.Samples(row(m), "mops_per_sec")) > 0
	}
	if has("kerby") {
		for _, t := range []struct {
			other string
			want  float64
		}{{"vanilla", 5}, {"fixed128", 1.5}, {"fixed1024", 0.9}, {reflector, 0.5}} {
			if !has(t.other) {
				continue
			}
			name := "kerby_vs_" + t.other
			rep.PairedRatio(name, row("kerby"), "mops_per_sec", row(t.other), "mops_per_sec")
			rep.TargetRatio(name, ">=", t.want)
		}
		if has("vanilla") {
			vp, _, _, _ := rep.Spread(row("vanilla"), "p99_us")
			rep.TargetMetric("kerby p99_us <= vanilla p99_us", row("kerby"), "p99_us", "<=", vp)
			rep.PairedRatio("kerby_vs_vanilla_per_server_core", row("kerby"), "mops_per_server_core", row("vanilla"), "mops_per_server_core")
		}
		if b.gen != nil && slices.Contains(b.opt.Clients, "user-space") && has("vanilla") {
			rep.PairedRatio("user_space_kerby_vs_vanilla", userRow+"kerby", "mops_per_sec", userRow+"vanilla", "mops_per_sec")
		}
	}
	if v, ok := rep.Get("kerby", "memory_efficiency"); ok {
		rep.Target("kerby memory_efficiency", v.(float64), ">=", 0.90)
	} else if v, ok := rep.Get(userRow+"kerby", "memory_efficiency"); ok {
		rep.Target("kerby memory_efficiency", v.(float64), ">=", 0.90)
	}
	if v, ok := rep.Get("fixed1024", "memory_efficiency"); ok {
		rep.Target("fixed1024 memory_efficiency", v.(float64), "<=", 0.40)
	} else if v, ok := rep.Get(userRow+"fixed1024", "memory_efficiency"); ok {
		rep.Target("fixed1024 memory_efficiency", v.(float64), "<=", 0.40)
	}
	var wrong float64
	for _, r := range rep.Rows() {
		for _, x := range rep.Samples(r, "wrong_values") {
			wrong += x
		}
		if v, ok := rep.Get(r, "wrong_values"); ok && len(rep.Samples(r, "wrong_values")) == 0 {
			wrong += v.(float64)
		}
	}
	rep.Target("wrong_values (all rows, all rounds)", wrong, "==", 0)
	if b.gen != nil {
		rep.Note("rows kerby, fixed128, fixed1024, vanilla and reflector: the kernel load generator (BPF_PROG_RUN with XDP live frames " +
			"from the client namespace, open loop; replies counted, checked and dropped by XDP on the client veth); native XDP on both ends. " +
			"mops_per_sec counts replies; mops_per_server_core divides them by memcached's CPU plus all softirq time, where the server's XDP runs " +
			"(it also holds the client's reply counter: an upper bound on the server's cost)")
	}
	if slices.Contains(b.opt.Clients, "user-space") {
		rep.Note("rows user-space MODE: the Go load generator (closed loop, sendmmsg/recvmmsg) on the same 2 cores as the server, " +
			"so these ratios are capped by the client's own cost; generic XDP unless --native")
		if !b.opt.Quick {
			rep.Note("rows user-space MODE mix95_*: one run per mode after the rounds (SETs would make the other modes' kernel copies stale)")
		}
	}
}

func (b *kvBench) close() {
	for _, c := range b.clients {
		c.Close()
	}
	if b.gen != nil {
		b.gen.Close()
	}
	for _, s := range b.srv {
		s.Close()
	}
	if b.mc != nil {
		b.mc.Stop()
	}
}

func mcUDPAddr(p *netenv.Pair) *net.UDPAddr {
	return &net.UDPAddr{IP: p.ServerIP, Port: 11211}
}

// liveLine reports throughput, the kernel hit ratio and memory efficiency
// about once a second (the generator calls it ten times a second).
func liveLine(live func(string), b *kvBench, phase *string) func(done uint64) {
	if live == nil {
		return nil
	}
	var last uint64
	lastT := time.Now()
	return func(done uint64) {
		now := time.Now()
		if done < last { // a new phase
			last, lastT = 0, now
		}
		if now.Sub(lastT) < time.Second {
			return
		}
		rate := float64(done-last) / now.Sub(lastT).Seconds()
		last, lastT = done, now
		line := fmt.Sprintf("%-9s %-12s %9.0f ops/s", b.cur, *phase, rate)
		if srv := b.srv[b.cur]; srv != nil {
			if st, err := srv.Stats(); err == nil {
				line += fmt.Sprintf("  kernel hit ratio %.3f  memory efficiency %.3f", st.KernelHitRatio, st.Pool.MemoryEfficiency)
			}
		}
		live(line)
	}
}

// serverCPU is memcached's CPU time plus the machine's softirq time, where
// XDP, TC and the network stack run: an upper bound on the server side's
// cost (it also holds the client side's packet processing).
func serverCPU(memcachedPid int) time.Duration {
	return benchkit.ProcCPU(memcachedPid) + benchkit.SoftirqCPU()
}
