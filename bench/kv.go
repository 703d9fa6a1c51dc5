// Package bench holds Cistern's benchmarks: each sets up real components
// (namespaces, servers, BPF programs), drives them, and fills a
// benchkit.Report (table, JSON, plot).
package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/loadgen"
	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/kv"
)

// KVOptions configure the Kerby-KV benchmark.
type KVOptions struct {
	Quick   bool
	Keys    int           // distinct keys (default 100000; quick 20000)
	Phase   time.Duration // length of each measured phase (default 10s; quick 3s)
	Workers int
	Depth   int      // outstanding requests per worker (loadgen default 32)
	Batch   int      // datagrams per sendmmsg/recvmmsg (loadgen default 16)
	Modes   []string // subset of vanilla, fixed128, fixed1024, kerby
	Skews   []float64
	// Native attaches XDP in driver mode. On veth it is slower than generic
	// (every skb is converted to an XDP frame and back, and the client side
	// needs an XDP program too), so the bench uses generic unless asked;
	// mode "kerby-native" measures native beside the others.
	Native   bool
	PlotPath string            // optional PNG of throughput per mode and phase
	Live     func(line string) // optional: one line per second while a phase runs
	Progress func(step string) // optional: announces each step
}

func (o *KVOptions) defaults() {
	if o.Keys == 0 {
		o.Keys = 100000
		if o.Quick {
			o.Keys = 20000
		}
	}
	if o.Phase == 0 {
		o.Phase = 10 * time.Second
		if o.Quick {
			o.Phase = 3 * time.Second
		}
	}
	if o.Workers == 0 {
		o.Workers = 2 // one per core
	}
	if len(o.Modes) == 0 {
		o.Modes = []string{"vanilla", "fixed128", "fixed1024", "kerby"}
	}
	if len(o.Skews) == 0 {
		o.Skews = []float64{0.9, 0.99}
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
}

func kvConfig(mode string, keys int) (kv.Config, bool) {
	// Pools sized to hold the whole working set with room to spare: the
	// comparison is about layout, not about eviction.
	mb := uint32(keys*400/(1<<20)) + 8
	switch mode {
	case "kerby", "kerby-native":
		return kv.Config{Mode: kv.ModeKerby, BlockSize: 128, MaxBlocks: 8, PoolMB: mb, MaxObjects: uint32(keys * 2)}, true
	case "fixed128":
		return kv.Config{Mode: kv.ModeFixed, SlotSize: 128, PoolMB: mb, MaxObjects: uint32(keys * 2)}, true
	case "fixed1024":
		return kv.Config{Mode: kv.ModeFixed, SlotSize: 1024, PoolMB: uint32(keys*1024*2/(1<<20)) + 8, MaxObjects: uint32(keys * 2)}, true
	}
	return kv.Config{}, false
}

type phase struct {
	name     string
	skew     float64
	getRatio float64
}

// KV runs the Kerby-KV benchmark and returns its report.
func KV(ctx context.Context, opt KVOptions) (*benchkit.Report, error) {
	opt.defaults()
	rep := benchkit.New("kv", opt.Quick)
	rep.SetConfig("keys", opt.Keys)
	rep.SetConfig("key_bytes", 8)
	rep.SetConfig("values", "75% 128 B, 25% 1024 B")
	rep.SetConfig("phase_seconds", opt.Phase.Seconds())
	rep.SetConfig("workers", opt.Workers)
	rep.SetConfig("depth", max(opt.Depth, 32)) // loadgen's default is 32
	rep.SetConfig("xdp", map[bool]string{true: "native", false: "generic (veth; see --native)"}[opt.Native])
	rep.SetConfig("skews", opt.Skews)

	pair, err := netenv.NewPair("kvb", netenv.Options{Subnet: 240})
	if err != nil {
		return nil, err
	}
	defer pair.Close()
	// Native XDP_TX across veth: the peer needs tx checksumming off (the
	// reply carries no UDP checksum) and an XDP program of its own.
	if out, err := netenv.Command(pair.ClientNSName(), "ethtool", "-K", pair.ClientIf, "tx", "off").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ethtool -K %s tx off: %v: %s", pair.ClientIf, err, out)
	}
	rep.SetConfig("veth", pair.ServerIf+" <-> "+pair.ClientIf)

	var phases []phase
	for _, sk := range opt.Skews {
		phases = append(phases, phase{fmt.Sprintf("get_%g", sk), sk, 1})
	}
	last := opt.Skews[len(opt.Skews)-1]
	phases = append(phases, phase{fmt.Sprintf("mix95_%g", last), last, 0.95})
	rep.SetConfig("phases", phaseNames(phases))

	results := map[string]map[string]loadgen.Result{}
	for _, mode := range opt.Modes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		res, err := runKVMode(ctx, rep, pair, mode, phases, opt)
		if err != nil {
			return nil, fmt.Errorf("mode %s: %w", mode, err)
		}
		results[mode] = res
	}

	ratio := func(a, b string) float64 {
		ra, oka := results[a][headline]
		rb, okb := results[b][headline]
		if !oka || !okb || rb.OpsPerSec == 0 {
			return 0
		}
		return ra.OpsPerSec / rb.OpsPerSec
	}
	_, haveK := results["kerby"]
	if _, ok := results["vanilla"]; ok && haveK {
		kvv := ratio("kerby", "vanilla")
		rep.Ratio("kerby_vs_vanilla", kvv)
		rep.Target("kerby_vs_vanilla", kvv, ">=", 3.0)
		if vs, ok := rep.Get("vanilla", "server_cpu_us_per_op"); ok {
			if ks, ok := rep.Get("kerby", "server_cpu_us_per_op"); ok && ks.(float64) > 0 {
				rep.Ratio("vanilla_vs_kerby_server_cpu_per_op", vs.(float64)/ks.(float64))
			}
		}
		if kp, ok := rep.Get("kerby", "p99_us"); ok {
			if vp, ok := rep.Get("vanilla", "p99_us"); ok {
				rep.Target("kerby p99_us <= vanilla p99_us", kp.(float64), "<=", vp.(float64))
			}
		}
	}
	if _, ok := results["fixed128"]; ok && haveK {
		kvf := ratio("kerby", "fixed128")
		rep.Ratio("kerby_vs_fixed128", kvf)
		rep.Target("kerby_vs_fixed128", kvf, ">=", 1.5)
	}
	if v, ok := rep.Get("kerby", "memory_efficiency"); ok && haveK {
		rep.Target("kerby memory_efficiency", v.(float64), ">=", 0.90)
	}
	if v, ok := rep.Get("fixed1024", "memory_efficiency"); ok {
		rep.Target("fixed1024 memory_efficiency", v.(float64), "<=", 0.40)
	}
	var wrong float64
	for _, mode := range opt.Modes {
		for _, r := range results[mode] {
			wrong += float64(r.WrongValues)
		}
	}
	rep.Target("wrong_values (all modes)", wrong, "==", 0)
	rep.Note("client-bound: the load generator and the server share 2 cores, so throughput ratios are capped by " +
		"the client's own cost. cpu_us_per_op is all CPU time of the machine per operation; server_cpu_us_per_op " +
		"is memcached's CPU plus all softirq time (XDP, TC, network stack of both sides), an upper bound on the server side.")
	if opt.PlotPath != "" {
		if err := plotKV(rep, opt.PlotPath, opt.Modes, phaseNames(phases)); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func phaseNames(ps []phase) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.name)
	}
	return out
}

// runKVMode starts a fresh memcached (and Kerby-KV unless vanilla), preloads
// every key, then runs each phase.
func runKVMode(ctx context.Context, rep *benchkit.Report, pair *netenv.Pair, mode string, phases []phase,
	opt KVOptions) (map[string]loadgen.Result, error) {
	opt.Progress(fmt.Sprintf("%s: starting memcached", mode))
	rep.Set(mode, "ops_per_sec", 0.0) // the headline row first in the table
	mc, err := servers.StartMemcached(servers.MemcachedOptions{
		Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: 11211, Threads: 2, MemoryMB: 1024,
	})
	if err != nil {
		return nil, err
	}
	defer mc.Stop()

	var srv *kv.Server
	if cfg, ok := kvConfig(mode, opt.Keys); ok {
		opt.Progress(fmt.Sprintf("%s: loading Kerby-KV", mode))
		if srv, err = kv.Load(cfg); err != nil {
			return nil, err
		}
		defer srv.Close()
		var peer link.Link
		xdpMode := kv.XDPGeneric
		if opt.Native || strings.HasSuffix(mode, "-native") {
			xdpMode = kv.XDPNative // the client end gets an XDP_PASS program below
		}
		err = netenv.Do(pair.ServerNS, func() error { return srv.Attach(pair.ServerIfindex, xdpMode) })
		if err == nil && srv.XDPMode == "native" {
			err = netenv.Do(pair.ClientNS, func() (err error) {
				peer, err = srv.AttachPeerPass(pair.ClientIfindex)
				return err
			})
			if peer != nil {
				defer peer.Close()
			}
		}
		if err != nil {
			return nil, err
		}
		rep.Set(mode, "xdp_native", srv.XDPMode == "native")
	}

	// One client per skew (the generator's skew is fixed per client); each
	// preloads every key so that it knows every value's version.
	out := map[string]loadgen.Result{}
	for _, sk := range skewsOf(phases) {
		var client *loadgen.Client
		var phaseName string
		progress := liveLine(opt.Live, srv, mode, &phaseName)
		err = netenv.Do(pair.ClientNS, func() (err error) {
			client, err = loadgen.New(loadgen.Config{
				Server:    mcUDPAddr(pair),
				Workers:   opt.Workers,
				Depth:     opt.Depth,
				Batch:     opt.Batch,
				Keys:      opt.Keys,
				Skew:      sk,
				ValueSize: loadgen.DefaultValueSize,
				Seed:      1,
				Progress:  progress,
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		phaseName = "preload"
		opt.Progress(fmt.Sprintf("%s: preloading %d keys (skew %g)", mode, opt.Keys, sk))
		if _, err := client.Preload(ctx); err != nil {
			client.Close()
			return nil, fmt.Errorf("preload: %w", err)
		}
		for _, ph := range phases {
			if ph.skew != sk {
				continue
			}
			phaseName = ph.name
			opt.Progress(fmt.Sprintf("%s: %s for %v", mode, ph.name, opt.Phase))
			var before map[string]uint64
			if srv != nil {
				before, _ = srv.Counters()
			}
			cpu0, srv0 := systemCPU(), serverCPU(mc.Pid())
			res, err := client.RunPhase(ctx, loadgen.Phase{GetRatio: ph.getRatio, Duration: opt.Phase})
			if err != nil {
				client.Close()
				return nil, fmt.Errorf("%s: %w", ph.name, err)
			}
			cpu, scpu := systemCPU()-cpu0, serverCPU(mc.Pid())-srv0
			out[ph.name] = res
			record(rep, mode, ph, res, cpu, scpu, srv, before)
		}
		client.Close()
	}
	if srv != nil {
		st, err := srv.Stats()
		if err != nil {
			return nil, err
		}
		rep.Set(mode, "memory_efficiency", st.Pool.MemoryEfficiency)
		rep.Set(mode, "kernel_value_bytes", float64(st.Pool.LiveBlocks)*float64(st.Pool.BlockSize))
		rep.Set(mode, "leaked_blocks", float64(st.Pool.LeakedBlocks))
	} else {
		rep.Set(mode, "memory_efficiency", 0.0)
	}
	return out, nil
}

func skewsOf(ps []phase) []float64 {
	var out []float64
	for _, p := range ps {
		if len(out) == 0 || out[len(out)-1] != p.skew {
			out = append(out, p.skew)
		}
	}
	return out
}

// record puts one phase's figures in the report: the headline phase (GET
// only, skew 0.99) under the mode's own name, the others as "mode phase".
func record(rep *benchkit.Report, mode string, ph phase, res loadgen.Result, cpu, scpu time.Duration, srv *kv.Server, before map[string]uint64) {
	row := mode
	if ph.name != headline {
		row = mode + " " + ph.name
	}
	rep.Set(row, "ops_per_sec", res.OpsPerSec)
	rep.Set(row, "p50_us", float64(res.P50.Microseconds()))
	rep.Set(row, "p99_us", float64(res.P99.Microseconds()))
	ratio := 0.0
	if srv != nil {
		after, _ := srv.Counters()
		hits := float64(after["hits"] - before["hits"])
		miss := float64(after["misses"] - before["misses"])
		if hits+miss > 0 {
			ratio = hits / (hits + miss)
		}
	}
	rep.Set(row, "kernel_hit_ratio", ratio)
	if res.Ops > 0 {
		rep.Set(row, "cpu_us_per_op", cpu.Seconds()*1e6/float64(res.Ops))
		rep.Set(row, "server_cpu_us_per_op", scpu.Seconds()*1e6/float64(res.Ops))
	}
	rep.Set(row, "wrong_values", float64(res.WrongValues))
	rep.Set(row, "stale_values", float64(res.StaleValues))
	rep.Set(row, "lost_replies", float64(res.Lost))
}

const headline = "get_0.99"

func mcUDPAddr(p *netenv.Pair) *net.UDPAddr {
	return &net.UDPAddr{IP: p.ServerIP, Port: 11211}
}

// liveLine reports throughput, the kernel hit ratio and memory efficiency
// about once a second (the generator calls it ten times a second).
func liveLine(live func(string), srv *kv.Server, mode string, phase *string) func(done uint64) {
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
		line := fmt.Sprintf("%-9s %-12s %9.0f ops/s", mode, *phase, rate)
		if srv != nil {
			if st, err := srv.Stats(); err == nil {
				line += fmt.Sprintf("  kernel hit ratio %.3f  memory efficiency %.3f", st.KernelHitRatio, st.Pool.MemoryEfficiency)
			}
		}
		live(line)
	}
}

// systemCPU is the machine's busy CPU time so far (all CPUs, /proc/stat):
// on a 2-core box the load generator, memcached and XDP share the cores,
// so CPU per operation is the fair cost measure.
func systemCPU() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line := strings.SplitN(string(data), "\n", 2)[0]
	f := strings.Fields(line)
	var busy uint64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseUint(v, 10, 64)
		busy += n
	}
	tick := clockTick()
	return time.Duration(busy) * time.Second / time.Duration(tick)
}

// serverCPU is memcached's CPU time plus the machine's softirq time, where
// XDP, TC and the network stack run: an upper bound on the server side's
// cost (it also holds the client side's packet processing).
func serverCPU(memcachedPid int) time.Duration {
	var total time.Duration
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", memcachedPid)); err == nil {
		s := string(data)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 12 {
				u, _ := strconv.ParseUint(f[11], 10, 64)
				k, _ := strconv.ParseUint(f[12], 10, 64)
				total += time.Duration(u+k) * time.Second / time.Duration(clockTick())
			}
		}
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
		if len(f) > 7 {
			si, _ := strconv.ParseUint(f[7], 10, 64)
			total += time.Duration(si) * time.Second / time.Duration(clockTick())
		}
	}
	return total
}

func clockTick() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
}
