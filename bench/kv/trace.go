package kvbench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/evict/replay"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/kv"
)

// TraceOptions configure the trace mode of the Kerby-KV benchmark.
type TraceOptions struct {
	Quick     bool
	TraceDir  string   // default replay.TraceDir()
	Requests  int      // trace prefix replayed (default all; quick 100000)
	PoolMB    uint32   // Kerby pool (default 4; quick 1)
	Policies  []string // default every policy (quick: fifo, lru, s3fifo)
	Workers   int      // client sockets; requests are split by key so each key's order holds (default 4)
	PlotPath  string
	Progress  func(string)
	MaxValues int // values longer than this are cut (default 1000: fits 8 blocks of 128 B)
}

// "ring" is Kerby-KV without --policy: its built-in FIFO ring.
const ringMode = "ring"

// Trace replays the Twitter trace (cluster 52) against Kerby-KV in front
// of memcached, look-aside: GET; when memcached too has nothing, SET. The
// kernel hit ratio (GETs answered at XDP/TC over all GETs) is reported per
// eviction policy at one pool size, beside the same policy's hit ratio in
// an offline replay (cistern cache replay, sizes in pool blocks, the same
// block budget) as a yardstick.
func Trace(ctx context.Context, opt TraceOptions) (*benchkit.Report, error) {
	if opt.TraceDir == "" {
		opt.TraceDir = replay.TraceDir()
	}
	if opt.PoolMB == 0 {
		opt.PoolMB = 4
		if opt.Quick {
			opt.PoolMB = 1
		}
	}
	if opt.Requests == 0 && opt.Quick {
		opt.Requests = 100000
	}
	if len(opt.Policies) == 0 {
		opt.Policies = append([]string{ringMode}, kv.Policies()...)
		if opt.Quick {
			opt.Policies = []string{"fifo", "lru", "s3fifo"}
		}
	}
	if opt.Workers == 0 {
		opt.Workers = 4
	}
	if opt.MaxValues == 0 {
		opt.MaxValues = 1000
	}
	if opt.Progress == nil {
		opt.Progress = func(string) {}
	}
	for _, p := range opt.Policies {
		if p != ringMode {
			if err := (kv.Config{Policy: p}).Validate(); err != nil {
				return nil, err
			}
		}
	}
	path := filepath.Join(opt.TraceDir, "twitter_cluster52_1m.csv.zst")
	opt.Progress("reading " + path)
	reqs, err := replay.ReadFile(path, "twitter")
	if err != nil {
		return nil, err
	}
	if opt.Requests > 0 && opt.Requests < len(reqs) {
		reqs = reqs[:opt.Requests]
	}
	cfg := kv.Config{Mode: kv.ModeKerby, BlockSize: 128, MaxBlocks: 8, PoolMB: opt.PoolMB, WriteWindow: time.Nanosecond}
	pc := cfg.PoolConfig()
	budget, _ := kv.PolicyBudget(cfg)

	rep := benchkit.New("kv-trace", opt.Quick)
	rep.SetConfig("trace", "twitter_cluster52_1m (look-aside: GET; on a memcached miss, SET)")
	rep.SetConfig("requests", len(reqs))
	rep.SetConfig("distinct_keys", replay.Distinct(reqs))
	rep.SetConfig("pool_blocks", pc.CapacityBlocks)
	rep.SetConfig("block_bytes", pc.BlockSize)
	rep.SetConfig("policy_budget_blocks", budget)
	rep.SetConfig("workers", opt.Workers)
	rep.SetConfig("value_bytes", fmt.Sprintf("the trace's sizes, at most %d", opt.MaxValues))

	pair, err := netenv.NewPair("kvt", netenv.Options{Subnet: 241})
	if err != nil {
		return nil, err
	}
	defer pair.Close()

	// The yardstick: the same policies offline, object sizes in blocks.
	blockReqs := make([]evict.Request, len(reqs))
	for i, r := range reqs {
		n := min(int(r.Size), opt.MaxValues)
		blockReqs[i] = evict.Request{Key: r.Key, Size: uint32(max(1, (n+int(pc.BlockSize)-1)/int(pc.BlockSize)))}
	}
	var series []benchkit.BarSeries
	kernel := benchkit.BarSeries{Name: "Kerby-KV kernel hit ratio"}
	offline := benchkit.BarSeries{Name: "offline replay, same block budget"}
	for _, p := range opt.Policies {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		opt.Progress(fmt.Sprintf("%s: replaying %d requests through Kerby-KV", p, len(reqs)))
		st, err := kvTraceRun(ctx, pair, cfg, p, reqs, opt)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p, err)
		}
		rep.Set(p, "kernel_hit_ratio", st["kernel_hit_ratio"]) // the headline column first
		for _, k := range slices.Sorted(maps.Keys(st)) {       // then a stable order
			rep.Set(p, k, st[k])
		}
		kernel.Values = append(kernel.Values, st["kernel_hit_ratio"])
		off := 0.0
		if p != ringMode {
			res, err := replay.Run(blockReqs, replay.Options{Policy: p, Size: budget, Unit: "bytes"})
			if err != nil {
				return nil, err
			}
			off = res.HitRatio
		}
		rep.Set(p, "offline_hit_ratio", off)
		offline.Values = append(offline.Values, off)
	}
	series = append(series, kernel, offline)
	rep.Note("kernel_hit_ratio: GETs answered in the kernel over all GETs. offline_hit_ratio: cistern cache replay " +
		"of the same requests, sizes in 128-byte blocks, with the policy's block budget (the pool minus the 1/16 " +
		"reserve). They differ because in the server a key enters the kernel through the SET after a memcached " +
		"miss or a later GET reply (fills within 50 ms of a write are refused), the workers interleave their " +
		"key partitions, and events reach the policy through a queue drained every millisecond. " +
		"ring: Kerby-KV without --policy (its built-in FIFO ring).")
	if opt.PlotPath != "" {
		if err := benchkit.BarChart(opt.PlotPath, fmt.Sprintf("Kerby-KV on the Twitter trace, pool %d MiB (%s)", opt.PoolMB, rep.Kernel()),
			"hit ratio", opt.Policies, series); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// kvTraceRun replays reqs against a fresh memcached behind Kerby-KV with
// the policy p, and returns its figures.
func kvTraceRun(ctx context.Context, pair *netenv.Pair, cfg kv.Config, p string, reqs []evict.Request, opt TraceOptions) (map[string]float64, error) {
	mc, err := servers.StartMemcached(servers.MemcachedOptions{
		Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: 11211, Threads: 2, MemoryMB: 1024,
	})
	if err != nil {
		return nil, err
	}
	defer mc.Stop()
	if p != ringMode {
		cfg.Policy = p
	}
	srv, err := kv.Load(cfg)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	if err := netenv.Do(pair.ServerNS, func() error { return srv.Attach(pair.ServerIfindex, kv.XDPGeneric) }); err != nil {
		return nil, err
	}
	var drainErr error
	var once sync.Once
	srv.StartDrainer(kv.DefaultDrainInterval, func(err error) { once.Do(func() { drainErr = err }) })

	conns := make([]*net.UDPConn, opt.Workers)
	err = netenv.Do(pair.ClientNS, func() error {
		for i := range conns {
			c, err := net.DialUDP("udp4", nil, mcUDPAddr(pair))
			if err != nil {
				return err
			}
			conns[i] = c
		}
		return nil
	})
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	parts := make([][]evict.Request, opt.Workers)
	for _, r := range reqs {
		w := int(r.Key % uint64(opt.Workers))
		parts[w] = append(parts[w], r)
	}
	var tot traceCounts
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, opt.Workers)
	start := time.Now()
	for i := range conns {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := replayPart(ctx, conns[i], parts[i], opt.MaxValues)
			errs[i] = err
			mu.Lock()
			tot.add(c)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if drainErr != nil {
		return nil, drainErr
	}
	counters, err := srv.Counters()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{
		"kernel_hit_ratio": 0, "gets": float64(tot.gets), "sets": float64(tot.sets),
		"wrong_values": float64(tot.wrong), "lost_replies": float64(tot.lost),
		"requests_per_sec": float64(tot.gets) / elapsed.Seconds(),
		"evictions":        float64(counters["evictions"]),
		"policy_fallbacks": float64(counters["policy_fallbacks"]),
		"events_lost":      float64(counters["events_lost"]),
		"pool_full":        float64(counters["pool_full"]),
	}
	if h, m := counters["hits"], counters["misses"]; h+m > 0 {
		out["kernel_hit_ratio"] = float64(h) / float64(h+m)
	}
	return out, nil
}

type traceCounts struct{ gets, sets, wrong, lost uint64 }

func (t *traceCounts) add(o traceCounts) {
	t.gets += o.gets
	t.sets += o.sets
	t.wrong += o.wrong
	t.lost += o.lost
}

// traceValue is the value of key: size bytes derived from the key, so a
// hit can be checked.
func traceValue(key uint64, size int) []byte {
	v := make([]byte, size)
	for i := range v {
		v[i] = 'a' + byte((key>>(uint(i)%8*8)+uint64(i))%26)
	}
	return v
}

// replayPart runs one worker's requests in order, one at a time.
func replayPart(ctx context.Context, c *net.UDPConn, reqs []evict.Request, maxValue int) (traceCounts, error) {
	var n traceCounts
	buf := make([]byte, 4096)
	var id uint16
	// roundTrip sends one memcached UDP request and returns the reply text,
	// nil when none came (lost).
	roundTrip := func(cmd []byte) ([]byte, error) {
		id++
		frame := make([]byte, 8, 8+len(cmd))
		binary.BigEndian.PutUint16(frame[0:], id)
		binary.BigEndian.PutUint16(frame[4:], 1)
		frame = append(frame, cmd...)
		if _, err := c.Write(frame); err != nil {
			return nil, err
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for {
			c.SetReadDeadline(deadline)
			k, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return nil, nil
				}
				return nil, err
			}
			if k >= 8 && binary.BigEndian.Uint16(buf[0:]) == id {
				return buf[8:k], nil
			}
		}
	}
	for i, r := range reqs {
		if i%1024 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
		key := "t" + strconv.FormatUint(r.Key, 36)
		size := max(1, min(int(r.Size), maxValue))
		n.gets++
		rep, err := roundTrip([]byte("get " + key + "\r\n"))
		if err != nil {
			return n, err
		}
		if rep == nil {
			n.lost++
			continue
		}
		if bytes.HasPrefix(rep, []byte("VALUE ")) {
			// "VALUE key flags bytes\r\n<data>\r\nEND\r\n": the data must be
			// what this key's SET stored (an earlier size, maybe).
			i := bytes.Index(rep, []byte("\r\n"))
			f := bytes.Fields(rep[:max(i, 0)])
			vlen := -1
			if len(f) == 4 {
				vlen, _ = strconv.Atoi(string(f[3]))
			}
			if i < 0 || vlen < 0 || len(rep) < i+2+vlen || !bytes.Equal(rep[i+2:i+2+vlen], traceValue(r.Key, vlen)) {
				n.wrong++
			}
			continue
		}
		// Look-aside: memcached has nothing either, so the client sets it.
		n.sets++
		cmd := append([]byte(fmt.Sprintf("set %s 0 0 %d\r\n", key, size)), traceValue(r.Key, size)...)
		cmd = append(cmd, "\r\n"...)
		if rep, err = roundTrip(cmd); err != nil {
			return n, err
		} else if rep == nil {
			n.lost++
		}
	}
	return n, nil
}
