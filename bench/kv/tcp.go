package kvbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/loadgen"
	"github.com/cistern-ebpf/cistern/internal/netenv"
)

// TCP rows: the same keys, values and skew as the UDP rows, read over
// memcached's TCP connections by tcpLoad, with memcached alone ("tcp
// vanilla") and with Kerby-KV in front ("tcp kerby": its TCP path,
// bpf/kv/tcp.bpf.h). "user-space kerby" is the Kerby UDP row beside them.
const tcpRow = "tcp "

// tcpStep is the step of a round that runs every TCP row (tcpRound).
const tcpStep = "tcp rows (A B B A)"

// tcpModes are the modes with TCP rows.
var tcpModes = []string{"vanilla", "kerby"}

// Defaults of the TCP load client (Options.TCPConns, Options.TCPDepth).
const (
	tcpConns = 16 // connections
	tcpDepth = 4  // GETs pipelined per connection, in one write
)

// tcpResult is one TCP phase.
type tcpResult struct {
	gets, wrong, disorder uint64
	elapsed               time.Duration
	lat                   []time.Duration // per batch of TCPDepth GETs
}

// zipfTable draws keys with zipfian popularity (skew s < 1 allowed) by
// inverse CDF.
type zipfTable []float64

func newZipf(n int, s float64) zipfTable {
	t := make(zipfTable, n)
	var sum float64
	for i := range t {
		sum += 1 / math.Pow(float64(i+1), s)
		t[i] = sum
	}
	for i := range t {
		t[i] /= sum
	}
	return t
}

func (t zipfTable) draw(r *rand.Rand) int { return sort.SearchFloat64s(t, r.Float64()) % len(t) }

// tcpLoad runs TCPConns connections from the client namespace for d, each
// writing TCPDepth GETs at once and reading their replies: every reply
// must be for the key in its place (order) and carry the value the
// preload wrote (loadgen.CheckValue).
func (b *kvBench) tcpLoad(ctx context.Context, d time.Duration, z zipfTable, idle func()) (tcpResult, error) {
	addr := b.mc.Addr()
	conns := make([]net.Conn, b.opt.TCPConns)
	for i := range conns {
		err := netenv.Do(b.pair.ClientNS, func() (err error) {
			conns[i], err = net.DialTimeout("tcp", addr, 2*time.Second)
			return err
		})
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return tcpResult{}, err
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	hits, absent := b.opt.TCPHits, b.opt.Keys
	var mu sync.Mutex
	var res tcpResult
	errs := make(chan error, len(conns))
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func(i int, c net.Conn) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			br := bufio.NewReaderSize(c, 64<<10)
			var mine tcpResult
			keys := make([]int, b.opt.TCPDepth)
			var req []byte
			for time.Now().Before(deadline) && ctx.Err() == nil {
				req = req[:0]
				for j := range keys {
					keys[j] = z.draw(r)
					if r.Float64() >= hits {
						// a key no one ever sets: memcached and Kerby-KV
						// both answer END
						keys[j] = absent + r.IntN(absent)
					}
					req = append(req, "get "...)
					req = loadgen.AppendKey(req, keys[j])
					req = append(req, "\r\n"...)
				}
				t0 := time.Now()
				c.SetDeadline(t0.Add(5 * time.Second))
				if _, err := c.Write(req); err != nil {
					errs <- err
					return
				}
				for _, k := range keys {
					w, dis, err := readChecked(br, k, k >= absent)
					if err != nil {
						errs <- err
						return
					}
					mine.wrong += w
					mine.disorder += dis
					mine.gets++
				}
				mine.lat = append(mine.lat, time.Since(t0))
			}
			mu.Lock()
			res.gets += mine.gets
			res.wrong += mine.wrong
			res.disorder += mine.disorder
			res.lat = append(res.lat, mine.lat...)
			mu.Unlock()
		}(i, c)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if idle != nil {
		idle() // every reply read, the connections still open
	}
	close(errs)
	for err := range errs {
		return res, err
	}
	return res, nil
}

// readChecked reads one GET reply and checks it is key k's preloaded
// value, or no value when k is absent (never set): wrong counts a bad
// value, a miss of a preloaded key or a value for an absent one, disorder
// a reply for another key (an answer out of request order).
func readChecked(r *bufio.Reader, k int, absent bool) (wrong, disorder uint64, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, 0, err
	}
	if bytes.Equal(line, []byte("END\r\n")) {
		if absent {
			return 0, 0, nil
		}
		return 1, 0, nil // the preload wrote every key: a miss is wrong
	}
	f := strings.Fields(string(line))
	if len(f) < 4 || f[0] != "VALUE" {
		return 0, 0, fmt.Errorf("tcp load: unexpected reply %q", line)
	}
	n, err := strconv.Atoi(f[3])
	if err != nil {
		return 0, 0, fmt.Errorf("tcp load: bad VALUE line %q", line)
	}
	key := f[1]
	data := make([]byte, n+2)
	if _, err := io.ReadFull(r, data); err != nil {
		return 0, 0, err
	}
	end, err := r.ReadSlice('\n')
	if err != nil {
		return 0, 0, err
	}
	if string(end) != "END\r\n" {
		return 0, 0, fmt.Errorf("tcp load: %q after a value", end)
	}
	if key != loadgen.Key(k) {
		return 0, 1, nil
	}
	if absent {
		return 1, 0, nil
	}
	if _, err := loadgen.CheckValue(data[:n], k, loadgen.DefaultValueSize(k)); err != nil {
		return 1, 0, nil
	}
	return 0, 0, nil
}

// kworkerCPU is the CPU time so far of each kernel worker thread: the
// sockmap's backlog worker, which sends Kerby-KV's TCP replies, runs there.
func kworkerCPU() map[int]time.Duration {
	cpu := map[int]time.Duration{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || !strings.HasPrefix(string(comm), "kworker") {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		cpu[pid] = benchkit.ProcCPU(pid)
	}
	return cpu
}

// kworkerDelta is the CPU the kernel workers used between two kworkerCPU
// readings: workers come and go, so each is taken from its own start (0
// for one that started since) and one that ended counts nothing.
func kworkerDelta(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range after {
		if t > before[pid] {
			d += t - before[pid]
		}
	}
	return d
}

// tcpPart is what one TCP phase of a mode used and counted.
type tcpPart struct {
	res          tcpResult
	mc, si, kw   time.Duration // memcached's threads, all softirq, all kernel workers
	bpf          time.Duration // the TCP programs' run time
	counters     map[string]float64
	bpfMeasured  bool
	kernelServed bool
	stuck        int // server sockets with unread bytes once the client had every reply
	mcN          mcCounts
	mcErr        error // the read counter could not run: its metrics are left out
}

// add sums another phase of the same mode into p.
func (p *tcpPart) add(q tcpPart) {
	p.res.gets += q.res.gets
	p.res.wrong += q.res.wrong
	p.res.disorder += q.res.disorder
	p.res.elapsed += q.res.elapsed
	p.res.lat = append(p.res.lat, q.res.lat...)
	p.mc, p.si, p.kw, p.bpf = p.mc+q.mc, p.si+q.si, p.kw+q.kw, p.bpf+q.bpf
	p.bpfMeasured = p.bpfMeasured || q.bpfMeasured
	p.stuck += q.stuck
	p.mcN.Reads, p.mcN.EAGAIN, p.mcN.Wakeups = p.mcN.Reads+q.mcN.Reads, p.mcN.EAGAIN+q.mcN.EAGAIN, p.mcN.Wakeups+q.mcN.Wakeups
	p.mcErr = errors.Join(p.mcErr, q.mcErr)
	p.kernelServed = p.kernelServed || q.kernelServed
	if p.counters == nil {
		p.counters = map[string]float64{}
	}
	for k, v := range q.counters {
		p.counters[k] += v
	}
}

// tcpPhase runs the TCP client against one mode for d.
func (b *kvBench) tcpPhase(ctx context.Context, mode string, d time.Duration) (tcpPart, error) {
	var p tcpPart
	err := b.withServer(mode, false, func() error {
		srv := b.srv[mode]
		var before map[string]uint64
		if srv != nil {
			before, _ = srv.Counters()
		}
		// BPF run time of the TCP programs, counted while this phase runs
		var bpf0 time.Duration
		stats, _ := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if stats != nil {
			defer stats.Close()
		}
		if srv != nil {
			bpf0, _, _ = srv.TCPRuntime()
		}
		// memcached's reads, EAGAINs and wake-ups: functional counts
		// of the kernel behaviours (docs/kerby-kv.md), timing-free
		mcc, err := newMCCounter(b.mc.Pid())
		var mcBefore mcCounts
		if err == nil {
			defer mcc.close()
			mcBefore, err = mcc.counts()
		}
		p.mcErr = err
		mc0, si0, kw0 := benchkit.ProcCPU(b.mc.Pid()), benchkit.SoftirqCPU(), kworkerCPU()
		res, err := b.tcpLoad(ctx, d, b.zipf, func() { p.stuck = b.stuckConnections() })
		if err != nil {
			return err
		}
		if p.mcErr == nil {
			after, err := mcc.counts()
			p.mcN, p.mcErr = after.sub(mcBefore), err
		}
		p.res = res
		p.mc, p.si, p.kw = benchkit.ProcCPU(b.mc.Pid())-mc0, benchkit.SoftirqCPU()-si0, kworkerDelta(kw0, kworkerCPU())
		if srv != nil {
			p.kernelServed = true
			if bpf1, _, err := srv.TCPRuntime(); err == nil && stats != nil && bpf1 >= bpf0 {
				p.bpf, p.bpfMeasured = bpf1-bpf0, true
			}
			after, _ := srv.Counters()
			p.counters = map[string]float64{}
			for _, k := range []string{"tcp_hits", "tcp_misses", "tcp_pass_order", "tcp_pass_mixed", "tcp_pass_first", "tcp_pass_large", "tcp_pass_split", "tcp_blind"} {
				p.counters[k] = float64(after[k] - before[k])
			}
		}
		return nil
	})
	return p, err
}

// tcpRound is one round of the TCP rows: each mode runs twice for half a
// phase, in the order A B B A (B A A B in odd rounds), so that a change of
// the machine's load during the round weighs on every mode alike.
func (b *kvBench) tcpRound(ctx context.Context, round int, modes []string) error {
	back := slices.Clone(modes)
	slices.Reverse(back)
	order := append(slices.Clone(modes), back...)
	if round%2 == 1 {
		slices.Reverse(order)
	}
	parts := map[string]*tcpPart{}
	for _, m := range order {
		p, err := b.tcpPhase(ctx, m, b.opt.Phase/2)
		if err != nil {
			return fmt.Errorf("%s: %w", tcpRow+m, err)
		}
		if parts[m] == nil {
			parts[m] = &tcpPart{}
		}
		parts[m].add(p)
	}
	for _, m := range modes {
		if err := b.tcpSample(tcpRow+m, *parts[m]); err != nil {
			return err
		}
	}
	return nil
}

// tcpSample records one round of a TCP row.
func (b *kvBench) tcpSample(row string, p tcpPart) error {
	res, put := p.res, b.rep.Sample
	if res.gets == 0 {
		return fmt.Errorf("%s: no GET answered", row)
	}
	put(row, "mops_per_sec", float64(res.gets)/res.elapsed.Seconds()/1e6)
	perOp := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(res.gets) }
	put(row, "server_cpu_us_per_op", perOp(p.mc+p.si+p.kw))
	// its parts: memcached's threads, all softirq, all kernel workers
	put(row, "memcached_us_per_op", perOp(p.mc))
	put(row, "softirq_us_per_op", perOp(p.si))
	put(row, "kworker_us_per_op", perOp(p.kw))
	sort.Slice(res.lat, func(i, j int) bool { return res.lat[i] < res.lat[j] })
	q := func(f float64) float64 { return float64(res.lat[int(f*float64(len(res.lat)-1))].Nanoseconds()) / 1e3 }
	put(row, "p50_us", q(0.5))
	put(row, "p99_us", q(0.99))
	put(row, "wrong_values", float64(res.wrong))
	put(row, "out_of_order", float64(res.disorder))
	put(row, "stuck_connections", float64(p.stuck))
	if p.mcErr != nil && !b.mcNoted {
		b.mcNoted = true
		b.rep.Note(fmt.Sprintf("memcached's read counter did not run (%v): memcached_reads, memcached_eagain_reads, memcached_wakeups and memcached_wakeups_per_kernel_segment are left out", p.mcErr))
	}
	if p.mcErr == nil {
		put(row, "memcached_reads", float64(p.mcN.Reads))
		put(row, "memcached_eagain_reads", float64(p.mcN.EAGAIN))
		put(row, "memcached_wakeups", float64(p.mcN.Wakeups))
	}
	if p.kernelServed {
		c := p.counters
		passed := c["tcp_misses"] + c["tcp_pass_order"] + c["tcp_pass_mixed"] + c["tcp_pass_first"] + c["tcp_pass_large"]
		if hits := c["tcp_hits"]; hits+passed > 0 {
			put(row, "kernel_hit_ratio", hits/(hits+passed))
		}
		if p.bpfMeasured {
			put(row, "bpf_us_per_op", perOp(p.bpf))
		}
		for _, k := range []string{"tcp_misses", "tcp_pass_order", "tcp_pass_mixed", "tcp_pass_first", "tcp_pass_large", "tcp_pass_split", "tcp_blind"} {
			put(row, k, c[k])
		}
		// Segments the kernel answered: the client writes depth GETs per
		// segment and a segment is answered whole or passed whole.
		if seg := c["tcp_hits"] / float64(b.opt.TCPDepth); seg > 0 && p.mcErr == nil {
			put(row, "kernel_segments", seg)
			put(row, "memcached_wakeups_per_kernel_segment", float64(p.mcN.Wakeups)/seg)
		}
	}
	return nil
}

// stuckConnections counts memcached's TCP sockets that still hold unread
// bytes (Recv-Q) when the client has read every reply and sent nothing
// more: in a closed loop there is then nothing for memcached to read, so
// such a socket is one whose copied_seq missed the advance of a segment
// the kernel answered; epoll reports it readable and read() finds
// nothing, and memcached's thread spins until the connection closes
// (docs/kerby-kv.md, "where the time goes").
func (b *kvBench) stuckConnections() int {
	// sampled twice, 200 ms apart: only a socket unread in both counts
	sample := func() map[string]bool {
		out, err := netenv.Command(b.pair.ServerNSName(), "ss", "-tnH", "state", "established", "( sport = :11211 )").Output()
		if err != nil {
			return nil
		}
		m := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			// Recv-Q Send-Q Local Peer
			if f := strings.Fields(line); len(f) >= 4 && f[0] != "0" {
				m[f[3]+" "+f[0]] = true
			}
		}
		return m
	}
	first := sample()
	time.Sleep(200 * time.Millisecond)
	n := 0
	for k := range sample() {
		if first[k] {
			n++
		}
	}
	return n
}

// tcpTargets judges Kerby TCP against memcached alone over TCP.
func (b *kvBench) tcpTargets() {
	rep := b.rep
	k, v := tcpRow+"kerby", tcpRow+"vanilla"
	if len(rep.Samples(k, "mops_per_sec")) == 0 || len(rep.Samples(v, "mops_per_sec")) == 0 {
		return
	}
	rep.PairedRatio("tcp_kerby_vs_vanilla", k, "mops_per_sec", v, "mops_per_sec")
	rep.TargetRatio("tcp_kerby_vs_vanilla", ">=", 1.5)
	rep.PairedRatio("tcp_kerby_vs_vanilla_server_cpu", k, "server_cpu_us_per_op", v, "server_cpu_us_per_op")
	rep.TargetRatio("tcp_kerby_vs_vanilla_server_cpu", "<=", 0.5)
	vp, _, _, _ := rep.Spread(v, "p99_us")
	rep.TargetMetric("tcp kerby p99_us <= tcp vanilla p99_us", k, "p99_us", "<=", vp)
	for _, row := range []string{k, v} {
		rep.TargetMetric(row+" wrong_values == 0", row, "wrong_values", "<=", 0)
		rep.TargetMetric(row+" out_of_order == 0", row, "out_of_order", "<=", 0)
	}
}
