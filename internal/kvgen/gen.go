// Package kvgen is a kernel-side memcached UDP load generator, the technique
// of xdp-tools' xdp-trafficgen: BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES
// runs an XDP program (bpf/kvgen/kvgen.bpf.c) that writes a GET for the next
// key of a precomputed zipfian stream into each frame and transmits it out
// of the client's veth. A second XDP program on that veth counts the replies,
// checks every value against the checksum of the value the bench preloaded,
// records the latency from a send time carried in the request id and the
// source port, and drops the reply, so the client's network stack never
// runs. The Go load generator (internal/loadgen) costs some microseconds of
// CPU per request on the cores the server uses; this one costs a few hundred
// nanoseconds, so the bench measures the server rather than the client.
//
// The programs load on every kernel with BPF_PROG_RUN live frames (5.18,
// kernel.XDPLiveFrames); callers check that first and fall back to
// internal/loadgen.
package kvgen

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -target bpfel -no-global-types kern ../../bpf/kvgen/kvgen.bpf.c

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/loadgen"
	"github.com/cistern-ebpf/cistern/kernel"
)

// Config describes the traffic: the keys and values the server was preloaded
// with (by internal/loadgen, at Version) and the two ends of the veth.
type Config struct {
	Keys      int
	Skew      float64           // zipfian θ of key popularity (loadgen.Zipfian)
	Seed      uint64            // the key stream's seed
	ValueSize func(key int) int // as loadgen.Config.ValueSize (default loadgen.DefaultValueSize)
	Version   uint32            // the preloaded values' version (default 1)
	StreamLen int               // keys precomputed into the stream (default 1<<20, a power of two)

	ClientMAC, ServerMAC net.HardwareAddr
	ClientIP, ServerIP   net.IP
	Port                 uint16 // memcached's UDP port (default 11211)
}

// Gen is the loaded generator.
type Gen struct {
	cfg  Config
	objs kernObjects
}

// expect mirrors struct kvgen_expect.
type expect struct {
	Len uint32
	_   uint32
	Sum uint64
}

// Counter indexes of kvgen_stats (the enum in kvgen.bpf.c).
const (
	statReplies = iota
	statHits
	statMisses
	statWrong
	statOther
	statUntimed
	nStats
)

const (
	reqLen     = 64
	latBuckets = 256
	sumK       = 0x9E3779B97F4A7C15
)

// Load checks the kernel, loads the programs and fills the stream, the
// request template and the expected replies.
func Load(cfg Config) (*Gen, error) {
	if err := kernel.XDPLiveFrames(); err != nil {
		return nil, err
	}
	if cfg.ValueSize == nil {
		cfg.ValueSize = loadgen.DefaultValueSize
	}
	if cfg.Version == 0 {
		cfg.Version = 1
	}
	if cfg.StreamLen == 0 {
		cfg.StreamLen = 1 << 20
	}
	if cfg.Port == 0 {
		cfg.Port = 11211
	}
	if cfg.StreamLen&(cfg.StreamLen-1) != 0 || cfg.Keys <= 0 {
		return nil, fmt.Errorf("kvgen: stream length %d must be a power of two and keys (%d) positive", cfg.StreamLen, cfg.Keys)
	}
	ip4c, ip4s := cfg.ClientIP.To4(), cfg.ServerIP.To4()
	if ip4c == nil || ip4s == nil || len(cfg.ClientMAC) != 6 || len(cfg.ServerMAC) != 6 {
		return nil, errors.New("kvgen: both ends need an IPv4 address and an Ethernet MAC")
	}
	spec, err := loadKern()
	if err != nil {
		return nil, err
	}
	spec.Maps["kvgen_stream"].MaxEntries = uint32(cfg.StreamLen)
	spec.Maps["kvgen_expects"].MaxEntries = uint32(cfg.Keys)
	for name, v := range map[string]any{
		"kvgen_port":        cfg.Port,
		"kvgen_stream_mask": uint32(cfg.StreamLen - 1),
		"kvgen_keys":        uint32(cfg.Keys),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("kvgen: set %s: %w", name, err)
		}
	}
	g := &Gen{cfg: cfg}
	if err := spec.LoadAndAssign(&g.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel refused the load generator's BPF program (a Cistern bug: please report it with 'cistern doctor --json'): %v", ve)
		}
		return nil, fmt.Errorf("kvgen: load: %w", err)
	}
	if err := g.fill(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// fill writes the template, the key stream and the expected replies.
func (g *Gen) fill() error {
	c := g.cfg
	if err := g.objs.KvgenTemplate.Put(uint32(0), Template(c)); err != nil {
		return fmt.Errorf("kvgen: template: %w", err)
	}
	z, err := loadgen.NewZipfian(c.Keys, c.Skew)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x6b7667656e))
	idx := make([]uint32, c.StreamLen)
	keys := make([]uint64, c.StreamLen)
	for i := range keys {
		idx[i] = uint32(i)
		keys[i] = binary.LittleEndian.Uint64([]byte(loadgen.Key(z.Rank(rng.Float64()))))
	}
	if _, err := g.objs.KvgenStream.BatchUpdate(idx, keys, nil); err != nil {
		return fmt.Errorf("kvgen: key stream: %w", err)
	}
	kidx := make([]uint32, c.Keys)
	exp := make([]expect, c.Keys)
	for k := range exp {
		kidx[k] = uint32(k)
		text := ReplyText(k, c.Version, c.ValueSize(k))
		exp[k] = expect{Len: uint32(len(text)), Sum: Checksum(text)}
	}
	if _, err := g.objs.KvgenExpects.BatchUpdate(kidx, exp, nil); err != nil {
		return fmt.Errorf("kvgen: expected replies: %w", err)
	}
	return nil
}

// Template is the request frame kvgen_tx starts from: Ethernet, IPv4 (with
// its checksum), UDP (no checksum), the memcached frame header and
// "get 00000000\r\n".
func Template(c Config) []byte {
	b := make([]byte, reqLen)
	copy(b[0:6], c.ServerMAC)
	copy(b[6:12], c.ClientMAC)
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_IP)
	ip := b[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], reqLen-14)
	copy(ip[12:16], c.ClientIP.To4())
	copy(ip[16:20], c.ServerIP.To4())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], 0x8000)
	binary.BigEndian.PutUint16(udp[2:], c.Port)
	binary.BigEndian.PutUint16(udp[4:], reqLen-34)
	b[47] = 1 // one datagram
	copy(b[50:], "get 00000000\r\n")
	return b
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// ReplyText is memcached's reply to a GET of key k holding the loadgen value
// at version: "VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n".
func ReplyText(k int, version uint32, size int) []byte {
	b := fmt.Appendf(nil, "VALUE %s %d %d\r\n", loadgen.Key(k), loadgen.KeyFlags(k), size)
	b = loadgen.AppendValue(b, k, version, size)
	return append(b, "\r\nEND\r\n"...)
}

// Checksum is kvgen_count's checksum of a reply text: little-endian 8-byte
// words, the tail zero-padded, summed Fletcher-style (a running sum and a sum
// of the running sums, so the order of words counts) and mixed once at the
// end: one add per word keeps the per-reply check cheap.
func Checksum(text []byte) uint64 {
	var a, b uint64
	i := 0
	for ; i+8 <= len(text); i += 8 {
		a += binary.LittleEndian.Uint64(text[i:])
		b += a
	}
	var w uint64
	for j := 0; i+j < len(text); j++ {
		w |= uint64(text[i+j]) << (8 * j)
	}
	a += w
	b += a
	return b*sumK ^ a
}

// Close unloads the programs and maps.
func (g *Gen) Close() error { return g.objs.Close() }

// AttachCounter puts kvgen_count on the client's veth in driver mode (call
// it in the client's namespace). It also makes the veth accept the native
// XDP_TX frames of the server's side.
func (g *Gen) AttachCounter(ifindex int) (link.Link, error) {
	return link.AttachXDP(link.XDPOptions{Program: g.objs.KvgenCount, Interface: ifindex, Flags: link.XDPDriverMode})
}

// AttachReflector puts the bare XDP_TX reflector on the server's veth.
func (g *Gen) AttachReflector(ifindex int) (link.Link, error) {
	return link.AttachXDP(link.XDPOptions{Program: g.objs.KvgenReflect, Interface: ifindex, Flags: link.XDPDriverMode})
}

// AttachPass puts an XDP_PASS program on the server's veth, so that it
// receives the generator's native frames when memcached answers alone.
func (g *Gen) AttachPass(ifindex int) (link.Link, error) {
	return link.AttachXDP(link.XDPOptions{Program: g.objs.KvgenPass, Interface: ifindex, Flags: link.XDPDriverMode})
}

// Result is what one Run saw.
type Result struct {
	Sent    uint64 // frames kvgen_tx produced (some may be dropped on a full veth ring)
	Replies uint64 // datagrams from the server's port
	Hits    uint64 // values whose length and checksum were right
	Misses  uint64
	Wrong   uint64 // values of the wrong length, key or content
	Other   uint64 // neither a value nor a miss (the reflector's echoes)
	Elapsed time.Duration

	OpsPerSec    float64 // replies per second
	P50, P99     time.Duration
	LatencyCount uint64
}

// RunOptions say where and how long to send.
type RunOptions struct {
	Ifindex  int           // the client's veth (in the namespace InNS enters)
	Duration time.Duration // how long to send
	Threads  int           // sending threads (default: one per CPU)
	// InNS runs fn on a thread in the client's namespace, where Ifindex
	// means the veth (netenv.Do).
	InNS func(fn func() error) error
}

// repeatPerCall bounds one BPF_PROG_RUN: long enough to amortise the
// syscall, short enough to stop on time (about 10 ms of frames).
const repeatPerCall = 1 << 14

// Run sends GETs for d from Threads threads, open loop (as fast as the
// kernel takes them), then waits briefly for the last replies, and reports.
func (g *Gen) Run(ctx context.Context, o RunOptions) (Result, error) {
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	before, err := g.counters()
	if err != nil {
		return Result{}, err
	}
	lat0, err := g.latency()
	if err != nil {
		return Result{}, err
	}
	frame := Template(g.cfg)
	var ctxIn struct {
		Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
	}
	ctxIn.DataEnd = reqLen
	ctxIn.IngressIfindex = uint32(o.Ifindex)
	var first, last time.Time // the senders' earliest start and latest end
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent uint64
	var firstErr error
	for t := range o.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := o.InNS(func() error {
				// One sender per CPU: two on one CPU would take turns.
				var set unix.CPUSet
				set.Set(t % runtime.NumCPU())
				_ = unix.SchedSetaffinity(0, &set) // best effort: a cpuset may forbid it
				defer func() {
					// The thread goes back to the pool: let it run anywhere.
					var all unix.CPUSet
					for c := range runtime.NumCPU() {
						all.Set(c)
					}
					_ = unix.SchedSetaffinity(0, &all)
				}()
				// Each sender times itself: on a busy machine a thread
				// may get its CPU late.
				var n uint64
				t0 := time.Now()
				deadline := t0.Add(o.Duration)
				defer func() {
					t1 := time.Now()
					mu.Lock()
					sent += n
					if first.IsZero() || t0.Before(first) {
						first = t0
					}
					if t1.After(last) {
						last = t1
					}
					mu.Unlock()
				}()
				for n == 0 || time.Now().Before(deadline) && ctx.Err() == nil {
					_, err := g.objs.KvgenTx.Run(&ebpf.RunOptions{
						Data: frame, Context: ctxIn, Repeat: repeatPerCall, Flags: kernel.BPFFTestXDPLiveFrames,
					})
					if err != nil {
						return fmt.Errorf("kvgen: BPF_PROG_RUN (live frames): %w", err)
					}
					n += repeatPerCall
				}
				return nil
			})
			if err != nil {
				mu.Lock()
				firstErr = errors.Join(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := last.Sub(first)
	time.Sleep(20 * time.Millisecond) // replies still in flight
	if firstErr != nil {
		return Result{}, firstErr
	}
	after, err := g.counters()
	if err != nil {
		return Result{}, err
	}
	lat1, err := g.latency()
	if err != nil {
		return Result{}, err
	}
	var d [nStats]uint64
	for i := range d {
		d[i] = after[i] - before[i]
	}
	var hist [latBuckets]uint64
	for i := range hist {
		hist[i] = lat1[i] - lat0[i]
	}
	r := Result{
		Sent: sent, Replies: d[statReplies], Hits: d[statHits], Misses: d[statMisses],
		Wrong: d[statWrong], Other: d[statOther], Elapsed: elapsed,
		OpsPerSec: float64(d[statReplies]) / elapsed.Seconds(),
	}
	r.P50, r.LatencyCount = quantile(hist[:], 0.50)
	r.P99, _ = quantile(hist[:], 0.99)
	return r, nil
}

func (g *Gen) counters() ([nStats]uint64, error) {
	var out [nStats]uint64
	for i := range out {
		var per []uint64
		if err := g.objs.KvgenStats.Lookup(uint32(i), &per); err != nil {
			return out, fmt.Errorf("kvgen: read counters: %w", err)
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out, nil
}

func (g *Gen) latency() ([latBuckets]uint64, error) {
	var out [latBuckets]uint64
	for i := range out {
		var per []uint64
		if err := g.objs.KvgenLatency.Lookup(uint32(i), &per); err != nil {
			return out, fmt.Errorf("kvgen: read latency: %w", err)
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out, nil
}

// BucketBounds is the range of nanoseconds bucket b of kvgen_count's
// histogram holds: below 4 one value each, above 4 per octave.
func BucketBounds(b int) (lo, hi uint64) {
	if b < 4 {
		return uint64(b), uint64(b) + 1
	}
	msb, sub := uint(b/4), uint64(b%4)
	lo = (4 | sub) << (msb - 2)
	return lo, lo + 1<<(msb-2)
}

// bucketOf mirrors lat_bucket in kvgen.bpf.c (for tests).
func bucketOf(ns uint64) int {
	if ns < 4 {
		return int(ns)
	}
	msb := uint(bits.Len64(ns) - 1)
	return int(msb*4+uint((ns>>(msb-2))&3)) & (latBuckets - 1)
}

// quantile is the q-quantile of the histogram, as the middle of its bucket.
func quantile(h []uint64, q float64) (time.Duration, uint64) {
	var total uint64
	for _, c := range h {
		total += c
	}
	if total == 0 {
		return 0, 0
	}
	want := uint64(q*float64(total-1)) + 1
	var seen uint64
	for b, c := range h {
		seen += c
		if seen >= want {
			lo, hi := BucketBounds(b)
			return time.Duration((lo + hi) / 2), total
		}
	}
	return 0, total
}
