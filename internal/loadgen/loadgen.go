package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Config describes the server, the engine and the workload. Zero values
// take the defaults given with each field.
type Config struct {
	// Server is memcached's UDP address. Required.
	Server *net.UDPAddr

	// Workers is the number of sockets, each driven by its own goroutine
	// (default 4).
	Workers int
	// Depth is the number of requests each worker keeps outstanding
	// (default 32, at most 4096).
	Depth int
	// Batch is the number of datagrams per sendmmsg and recvmmsg
	// (default 16).
	Batch int
	// Timeout retires a request without a reply as lost (default 200ms).
	Timeout time.Duration

	// Keys is the number of distinct keys (default 100000, at most MaxKeys).
	Keys int
	// Skew is the zipfian θ of key popularity (default 0.99; any θ > 0
	// works, see Zipfian); a negative value picks keys uniformly.
	Skew float64
	// Scrambled spreads the popular keys over the key space with a fixed,
	// seeded permutation of ranks to keys (the intent of YCSB's
	// ScrambledZipfian, but a bijection, so the distribution stays exact).
	// Unscrambled, key number r has popularity rank r.
	Scrambled bool
	// ValueSize gives each key's value size, from MinValueSize to
	// MaxValueSize; it must not change between calls (default
	// DefaultValueSize: 75% 128 B, 25% 1024 B).
	ValueSize func(key int) int
	// Seed makes key choices and the scrambling permutation reproducible.
	Seed uint64

	// GetRatio is the fraction of GETs in Run, in (0, 1]; 0 means 1
	// (GET-only). The Kerby paper's mixed workload is 0.95. SETs can fall
	// a little short of 1-GetRatio on very hot keys: a SET drawn for a key
	// that has one in flight already is sent as a GET.
	GetRatio float64
	// Duration and Ops bound Run: it stops issuing when Duration has passed
	// or when Ops requests have been issued, whichever comes first. When
	// both are zero Duration is 10s.
	Duration time.Duration
	Ops      uint64

	// Progress, when set, is called about ten times a second during
	// Preload and Run, and once at the end, with the number of requests
	// answered so far in the phase. It runs on the goroutine that called
	// the phase and should return quickly.
	Progress func(done uint64)
}

// Phase is what RunPhase runs; Run uses the Config's fields.
type Phase struct {
	GetRatio float64       // as Config.GetRatio
	Duration time.Duration // as Config.Duration
	Ops      uint64        // as Config.Ops
}

// Result is what a phase did. Requests that got a reply count in Ops (and
// in Gets or Sets) whatever the reply said; the other counters classify
// them.
type Result struct {
	// Sent is the number of request datagrams sent, retries included.
	Sent uint64
	// Ops = Gets + Sets: requests answered.
	Ops, Gets, Sets uint64
	// Hits are GET replies carrying a value (including wrong or stale
	// ones); Misses are GET replies of END only.
	Hits, Misses uint64
	// Lost requests got no reply within Timeout. Late replies arrived for
	// requests already retired as lost (or are the rest of a reply spread
	// over several datagrams); they are otherwise ignored.
	Lost, Late uint64
	// WrongValues are values of the wrong length, key or flags, with
	// corrupt or torn content, or with a version that was never written.
	WrongValues uint64
	// StaleValues are values older than the newest version whose SET was
	// acknowledged before the GET was sent.
	StaleValues uint64
	// Errors are malformed or error replies, replies spread over several
	// datagrams, send and receive failures, and Unexpected replies.
	Errors uint64
	// Unexpected replies match no request sent or retired (duplicates, for
	// instance); they are part of Errors.
	Unexpected uint64

	// Elapsed runs from the start of the phase to the last reply.
	Elapsed   time.Duration
	OpsPerSec float64
	// Latency, from sending a request to reading its reply, over answered
	// requests, to within 1.6%.
	P50, P99, P999, Mean, Max time.Duration
}

// String is a one-line summary, for logs.
func (r Result) String() string {
	return fmt.Sprintf("%.0f ops/s over %v: ops=%d gets=%d sets=%d hits=%d misses=%d lost=%d late=%d wrong=%d stale=%d errors=%d (unexpected=%d) sent=%d; latency p50=%v p99=%v p99.9=%v mean=%v max=%v",
		r.OpsPerSec, r.Elapsed.Round(time.Millisecond), r.Ops, r.Gets, r.Sets, r.Hits, r.Misses, r.Lost, r.Late,
		r.WrongValues, r.StaleValues, r.Errors, r.Unexpected, r.Sent, r.P50, r.P99, r.P999, r.Mean, r.Max)
}

// Client is a load generator bound to one server, with its sockets open.
// Its phases run one at a time.
type Client struct {
	cfg     Config
	conns   []*net.UDPConn
	workers []*worker

	keys  []byte   // key k is keys[k*KeyLen:][:KeyLen]
	sizes []uint16 // value size of each key
	zipf  *Zipfian
	perm  []uint32 // rank → key when Scrambled
	ks    keyState

	running   sync.Mutex // one phase at a time
	closeOnce sync.Once
}

// keyState is the per-key version bookkeeping shared by the workers.
type keyState struct {
	issued []atomic.Uint32 // highest version handed to a SET
	acked  []atomic.Uint32 // highest version whose SET was acknowledged
	busy   []atomic.Uint32 // 1 while a SET of the key is in flight

	mu   sync.Mutex
	lost map[uint64]struct{} // key<<32|version of SETs retired as lost
}

func (s *keyState) noteLost(key int, version uint32) {
	s.mu.Lock()
	s.lost[uint64(key)<<32|uint64(version)] = struct{}{}
	s.mu.Unlock()
}

func (s *keyState) wasLost(key int, version uint32) bool {
	s.mu.Lock()
	_, ok := s.lost[uint64(key)<<32|uint64(version)]
	s.mu.Unlock()
	return ok
}

func (s *keyState) ack(key int, version uint32) {
	a := &s.acked[key]
	for {
		old := a.Load()
		if version <= old || a.CompareAndSwap(old, version) {
			return
		}
	}
}

func (c *Config) setDefaults() error {
	if c.Server == nil {
		return errors.New("loadgen: no server address")
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Depth == 0 {
		c.Depth = 32
	}
	if c.Batch == 0 {
		c.Batch = 16
	}
	if c.Timeout == 0 {
		c.Timeout = 200 * time.Millisecond
	}
	if c.Keys == 0 {
		c.Keys = 100000
	}
	if c.Skew == 0 {
		c.Skew = 0.99
	}
	if c.ValueSize == nil {
		c.ValueSize = DefaultValueSize
	}
	switch {
	case c.Workers < 1:
		return fmt.Errorf("loadgen: %d workers", c.Workers)
	case c.Depth < 1 || c.Depth > 4096:
		return fmt.Errorf("loadgen: depth %d, want 1 to 4096", c.Depth)
	case c.Batch < 1 || c.Batch > 1024:
		return fmt.Errorf("loadgen: batch %d, want 1 to 1024", c.Batch)
	case c.Timeout < 0:
		return fmt.Errorf("loadgen: timeout %v", c.Timeout)
	case c.Keys < 1 || c.Keys > MaxKeys:
		return fmt.Errorf("loadgen: %d keys, want 1 to %d", c.Keys, MaxKeys)
	}
	return checkPhase(Phase{GetRatio: c.GetRatio, Duration: c.Duration, Ops: c.Ops})
}

func checkPhase(p Phase) error {
	if !(p.GetRatio >= 0 && p.GetRatio <= 1) {
		return fmt.Errorf("loadgen: get ratio %v, want 0 to 1", p.GetRatio)
	}
	if p.Duration < 0 {
		return fmt.Errorf("loadgen: duration %v", p.Duration)
	}
	return nil
}

// New checks cfg, computes the workload tables and opens one connected UDP
// socket per worker. The sockets are created in the network namespace of
// the calling OS thread and stay there, so New may be called inside
// netenv.Do and the phases from anywhere after.
func New(cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	n := cfg.Keys
	c.keys = make([]byte, 0, n*KeyLen)
	c.sizes = make([]uint16, n)
	maxSize := 0
	for k := range n {
		c.keys = AppendKey(c.keys, k)
		sz := cfg.ValueSize(k)
		if sz < MinValueSize || sz > MaxValueSize {
			return nil, fmt.Errorf("loadgen: value size %d for key %d, want %d to %d", sz, k, MinValueSize, MaxValueSize)
		}
		c.sizes[k] = uint16(sz)
		maxSize = max(maxSize, sz)
	}
	theta := cfg.Skew
	if theta < 0 {
		theta = 0 // uniform
	}
	var err error
	if c.zipf, err = NewZipfian(n, theta); err != nil {
		return nil, err
	}
	if cfg.Scrambled {
		c.perm = make([]uint32, n)
		for i := range c.perm {
			c.perm[i] = uint32(i)
		}
		r := rand.New(rand.NewPCG(cfg.Seed, 0x7065726d))
		r.Shuffle(n, func(i, j int) { c.perm[i], c.perm[j] = c.perm[j], c.perm[i] })
	}
	c.ks = keyState{
		issued: make([]atomic.Uint32, n),
		acked:  make([]atomic.Uint32, n),
		busy:   make([]atomic.Uint32, n),
		lost:   make(map[uint64]struct{}),
	}
	for i := range cfg.Workers {
		conn, err := dial(cfg.Server)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, conn)
		c.workers = append(c.workers, newWorker(c, i, conn, maxSize))
	}
	return c, nil
}

// dial opens a connected UDP socket with checksums off and large buffers.
func dial(server *net.UDPAddr) (*net.UDPConn, error) {
	conn, err := net.DialUDP("udp", nil, server)
	if err != nil {
		return nil, fmt.Errorf("loadgen: dial %v: %w", server, err)
	}
	if rc, err := conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			// Kerby-KV builds replies at XDP and sends them back with
			// XDP_TX; across veth that needs the client not to insist
			// on UDP checksums. Best effort: plain memcached does not
			// care.
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
			// Room for bursts of replies; the forced variant works as
			// root past net.core.rmem_max.
			for _, opt := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
				if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt[0], 4<<20) != nil {
					_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt[1], 4<<20)
				}
			}
		})
	}
	return conn, nil
}

// Close closes the sockets. A phase in progress ends with an error.
func (c *Client) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		for _, conn := range c.conns {
			if err := conn.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

// Config returns the configuration with defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// key returns key number k from the precomputed table (see Key).
func (c *Client) key(k int) []byte { return c.keys[k*KeyLen : (k+1)*KeyLen : (k+1)*KeyLen] }

// ValueSize returns the value size of key number k.
func (c *Client) ValueSize(k int) int { return int(c.sizes[k]) }

// AckedVersion returns the highest version of key number k whose SET was
// acknowledged (0 when none was).
func (c *Client) AckedVersion(k int) uint32 { return c.ks.acked[k].Load() }

// pickKey draws a key number from the popularity distribution.
func (c *Client) pickKey(r *rand.PCG) int {
	rank := c.zipf.Rank(uniform(r))
	if c.perm != nil {
		return int(c.perm[rank])
	}
	return rank
}

func uniform(r *rand.PCG) float64 { return float64(r.Uint64()>>11) * 0x1p-53 }

// preloadTries bounds how often Preload sends the SET of one key.
const preloadTries = 10

// Preload sets every key once, at a new version, retrying lost and failed
// SETs, and checks that memcached answered STORED. It fails if some key
// could not be stored after a few tries, or if ctx ends first (it then
// stops as RunPhase does).
func (c *Client) Preload(ctx context.Context) (Result, error) {
	res, err := c.phase(ctx, &phase{preload: true})
	if err != nil {
		return res, err
	}
	var failed uint64
	for _, w := range c.workers {
		failed += w.failed
	}
	if failed > 0 {
		return res, fmt.Errorf("loadgen: preload: %d of %d keys not stored after %d tries (%s)", failed, c.cfg.Keys, preloadTries, res)
	}
	return res, nil
}

// Run runs the phase the Config describes (GetRatio, Duration, Ops).
func (c *Client) Run(ctx context.Context) (Result, error) {
	return c.RunPhase(ctx, Phase{GetRatio: c.cfg.GetRatio, Duration: c.cfg.Duration, Ops: c.cfg.Ops})
}

// RunPhase runs GETs, or GETs and SETs, against the keys (which Preload
// should have set first: versions of keys this Client never set are not
// checked, only their content) and returns what happened. When ctx ends
// first, the phase stops issuing, waits for outstanding replies (at most
// Timeout) and returns what it did with ctx's error.
func (c *Client) RunPhase(ctx context.Context, p Phase) (Result, error) {
	if err := checkPhase(p); err != nil {
		return Result{}, err
	}
	if p.GetRatio == 0 {
		p.GetRatio = 1
	}
	if p.Duration == 0 && p.Ops == 0 {
		p.Duration = 10 * time.Second
	}
	return c.phase(ctx, &phase{getRatio: p.GetRatio, duration: p.Duration, ops: p.Ops})
}

// phase is what the workers of one phase share.
type phase struct {
	preload  bool
	getRatio float64
	duration time.Duration
	ops      uint64
	// stop ends issuing; the workers then wait for the outstanding
	// replies, at most Timeout.
	stop atomic.Bool
}

func (c *Client) phase(ctx context.Context, p *phase) (Result, error) {
	if !c.running.TryLock() {
		return Result{}, errors.New("loadgen: a phase is already running on this client")
	}
	defer c.running.Unlock()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}

	nw := uint64(len(c.workers))
	for i, w := range c.workers {
		budget := uint64(0)
		if p.ops > 0 {
			budget = p.ops / nw
			if uint64(i) < p.ops%nw {
				budget++
			}
		}
		w.reset(p, budget)
		w.idle = p.ops > 0 && budget == 0 // fewer ops than workers
	}

	start := mono()
	errs := make([]error, len(c.workers))
	var wg sync.WaitGroup
	for i, w := range c.workers {
		if w.idle {
			continue
		}
		wg.Go(func() { errs[i] = w.loop(p) })
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	var deadline <-chan time.Time
	if p.duration > 0 {
		t := time.NewTimer(p.duration)
		defer t.Stop()
		deadline = t.C
	}
	var tick <-chan time.Time
	if c.cfg.Progress != nil {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	var ctxErr error
wait:
	for {
		select {
		case <-finished:
			break wait
		case <-deadline:
			p.stop.Store(true)
			deadline = nil
		case <-tick:
			c.cfg.Progress(c.done())
		case <-ctx.Done():
			ctxErr = ctx.Err()
			p.stop.Store(true)
			<-finished
			break wait
		}
	}
	end := mono()
	if c.cfg.Progress != nil {
		c.cfg.Progress(c.done())
	}

	res := c.merge(start, end)
	return res, errors.Join(append(errs, ctxErr)...)
}

func (c *Client) done() uint64 {
	var n uint64
	for _, w := range c.workers {
		n += w.done.Load()
	}
	return n
}

func (c *Client) merge(start, end int64) Result {
	var r Result
	var h histogram
	last := int64(0)
	for _, w := range c.workers {
		s := &w.st
		r.Sent += s.sent
		r.Gets += s.gets
		r.Sets += s.sets
		r.Hits += s.hits
		r.Misses += s.misses
		r.Lost += s.lost
		r.Late += s.late
		r.WrongValues += s.wrong
		r.StaleValues += s.stale
		r.Errors += s.errors
		r.Unexpected += s.unexpected
		h.merge(&w.hist)
		last = max(last, w.lastReply)
	}
	r.Ops = r.Gets + r.Sets
	if last == 0 {
		last = end
	}
	r.Elapsed = time.Duration(max(last-start, 1))
	r.OpsPerSec = float64(r.Ops) / r.Elapsed.Seconds()
	r.P50, r.P99, r.P999 = h.quantile(0.50), h.quantile(0.99), h.quantile(0.999)
	r.Mean, r.Max = h.mean(), time.Duration(h.max)
	return r
}

var epoch = time.Now()

// mono is a cheap monotonic clock in nanoseconds.
func mono() int64 { return int64(time.Since(epoch)) }

// isConnRefused tells ICMP port unreachable reported on a connected socket.
func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
