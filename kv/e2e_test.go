package kv

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/tc"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// udpClient is the tests' memcached UDP client.
type udpClient = testenv.MemcachedUDP

type tcpClient struct {
	c net.Conn
	r *bufio.Reader
}

func (t *tcpClient) cmd(text string) (string, error) {
	t.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := t.c.Write([]byte(text)); err != nil {
		return "", err
	}
	return t.r.ReadString('\n')
}

// kvEnv is Kerby-KV attached in front of a real memcached, in namespaces.
type kvEnv struct {
	pair *netenv.Pair
	srv  *Server
	mc   *servers.Memcached
}

// newKVEnv attaches with the default XDP mode (auto) and no XDP program
// on the client end, as a container's veth would have.
func newKVEnv(t *testing.T, name string, cfg Config) *kvEnv {
	t.Helper()
	return newKVEnvWith(t, name, cfg, XDPAuto, false)
}

// newKVEnvWith attaches in mode; peerPass puts an XDP_PASS program on the
// client end, which native XDP_TX on a veth needs to deliver.
func newKVEnvWith(t *testing.T, name string, cfg Config, mode XDPMode, peerPass bool) *kvEnv {
	t.Helper()
	pair := testenv.NetPair(t, name)
	mc := testenv.Memcached(t, servers.MemcachedOptions{Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: 11211})
	if cfg.PoolMB == 0 {
		cfg.PoolMB = 8
	}
	srv, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := netenv.Do(pair.ServerNS, func() error { return srv.Attach(pair.ServerIfindex, mode) }); err != nil {
		t.Fatal(err)
	}
	if out, err := netenv.Command(pair.ClientNSName(), "ethtool", "-K", pair.ClientIf, "tx", "off").CombinedOutput(); err != nil {
		t.Fatalf("ethtool: %v %s", err, out)
	}
	if peerPass {
		var peer link.Link
		if err := netenv.Do(pair.ClientNS, func() (err error) { peer, err = srv.AttachPeerPass(pair.ClientIfindex); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { peer.Close() })
	}
	t.Logf("Kerby-KV attached with %s XDP (%s); tc: %s", srv.XDPMode, srv.XDPReason, srv.TCMode)
	return &kvEnv{pair: pair, srv: srv, mc: mc}
}

func (e *kvEnv) udp(t *testing.T) *udpClient {
	t.Helper()
	return testenv.DialMemcachedUDP(t, e.pair, 11211)
}

func (e *kvEnv) tcp(t *testing.T) *tcpClient {
	t.Helper()
	var c net.Conn
	err := netenv.Do(e.pair.ClientNS, func() (err error) {
		c, err = net.DialTimeout("tcp", e.mc.Addr(), 2*time.Second)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &tcpClient{c: c, r: bufio.NewReader(c)}
}

func (e *kvEnv) counter(t *testing.T, name string) uint64 {
	c, err := e.srv.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c[name]
}

func mustReply(t *testing.T, got string, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
}

// TestEndToEndMemcached runs in the default mode (generic XDP on this
// veth, no program on the client end), in native mode with an XDP_PASS
// program on the client end, and with kv_ingress and kv_egress attached as
// cls_bpf filters (the variant kernels before 6.6 get), forced here.
func TestEndToEndMemcached(t *testing.T) {
	t.Run("auto", func(t *testing.T) {
		testEndToEnd(t, newKVEnv(t, "kve2ea", Config{FillQuarantine: 5 * time.Millisecond}))
	})
	t.Run("native-peer-xdp", func(t *testing.T) {
		testEndToEnd(t, newKVEnvWith(t, "kve2en", Config{FillQuarantine: 5 * time.Millisecond}, XDPNative, true))
	})
	t.Run("cls_bpf", func(t *testing.T) {
		t.Setenv(tc.ForceClsBPFEnv, "1")
		e := newKVEnv(t, "kve2ec", Config{FillQuarantine: 5 * time.Millisecond})
		if !strings.HasPrefix(e.srv.TCMode, "cls_bpf") {
			t.Fatalf("TCMode %q with %s=1", e.srv.TCMode, tc.ForceClsBPFEnv)
		}
		in, eg := tcFilters(t, e.pair)
		if len(in) != 1 || len(eg) != 1 || in[0] != "cistern:kv_ingress" || eg[0] != "cistern:kv_egress" {
			t.Fatalf("cls_bpf filters: ingress %q egress %q", in, eg)
		}
		testEndToEnd(t, e)
		if e.counter(t, "tc_hits") == 0 {
			t.Fatal("no reply was built by kv_ingress as a cls_bpf filter")
		}
		if err := e.srv.Close(); err != nil {
			t.Fatal(err)
		}
		if in, eg := tcFilters(t, e.pair); len(in)+len(eg) != 0 {
			t.Fatalf("after Close, cls_bpf filters: ingress %q egress %q", in, eg)
		}
	})
}

// tcFilters names the tc filters on both hooks of the server interface.
func tcFilters(t *testing.T, p *netenv.Pair) (ingress, egress []string) {
	t.Helper()
	idx := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.ServerIfindex}}
	err := netenv.Do(p.ServerNS, func() error {
		for _, h := range []struct {
			parent uint32
			out    *[]string
		}{{netlink.HANDLE_MIN_INGRESS, &ingress}, {netlink.HANDLE_MIN_EGRESS, &egress}} {
			fs, err := netlink.FilterList(idx, h.parent)
			if err != nil {
				return err
			}
			for _, f := range fs {
				name := f.Type()
				if bf, ok := f.(*netlink.BpfFilter); ok {
					name = bf.Name
				}
				*h.out = append(*h.out, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ingress, egress
}

func testEndToEnd(t *testing.T, e *kvEnv) {
	u, tc := e.udp(t), e.tcp(t)

	// UDP set writes through; the GET is answered by the kernel.
	r, err := u.Do("set a 7 0 5\r\nhello\r\n")
	mustReply(t, r, err, "STORED\r\n")
	hits := e.counter(t, "hits")
	r, err = u.Do("get a\r\n")
	mustReply(t, r, err, "VALUE a 7 5\r\nhello\r\nEND\r\n")
	if e.counter(t, "hits") != hits+1 {
		t.Fatalf("GET of a UDP-set key was not answered by the kernel: %v", must(e.srv.Counters()))
	}

	// A 1000-byte value: the reply does not fit a veth XDP frame, so the TC
	// ingress path answers it, still without memcached.
	kb := strings.Repeat("q", 1000)
	r, err = u.Do("set kb 0 0 1000\r\n" + kb + "\r\n")
	mustReply(t, r, err, "STORED\r\n")
	hits = e.counter(t, "hits")
	r, err = u.Do("get kb\r\n")
	mustReply(t, r, err, "VALUE kb 0 1000\r\n"+kb+"\r\nEND\r\n")
	if e.counter(t, "hits") != hits+1 {
		t.Fatalf("1000-byte value not served by the kernel: %v", must(e.srv.Counters()))
	}

	// An add over TCP (a write the kernel invalidates: memcached may not
	// store it): the first GET misses and fills from memcached's reply, the
	// next is a kernel hit. (A TCP set would be written through.)
	r, err = tc.cmd("add b 0 0 3\r\nxyz\r\n")
	mustReply(t, r, err, "STORED\r\n")
	time.Sleep(20 * time.Millisecond) // past the fill quarantine of that write
	r, err = u.Do("get b\r\n")
	mustReply(t, r, err, "VALUE b 0 3\r\nxyz\r\nEND\r\n")
	time.Sleep(10 * time.Millisecond)
	if e.counter(t, "fills") == 0 {
		t.Fatal("memcached's reply did not fill the kernel")
	}
	hits = e.counter(t, "hits")
	r, err = u.Do("get b\r\n")
	mustReply(t, r, err, "VALUE b 0 3\r\nxyz\r\nEND\r\n")
	if e.counter(t, "hits") != hits+1 {
		t.Fatal("filled key was not answered by the kernel")
	}

	// A TCP overwrite and delete are seen by the next UDP GET.
	r, err = tc.cmd("set a 1 0 6\r\nworld!\r\n")
	mustReply(t, r, err, "STORED\r\n")
	r, err = u.Do("get a\r\n")
	mustReply(t, r, err, "VALUE a 1 6\r\nworld!\r\nEND\r\n")
	r, err = tc.cmd("delete a\r\n")
	mustReply(t, r, err, "DELETED\r\n")
	r, err = u.Do("get a\r\n")
	mustReply(t, r, err, "END\r\n")

	// UDP delete, then a miss answered by memcached.
	r, err = u.Do("delete b\r\n")
	mustReply(t, r, err, "DELETED\r\n")
	r, err = u.Do("get b\r\n")
	mustReply(t, r, err, "END\r\n")

	// A value over the kernel maximum is stored by memcached only.
	big := strings.Repeat("z", 1100)
	r, err = u.Do("set big 0 0 1100\r\n" + big + "\r\n")
	mustReply(t, r, err, "STORED\r\n")
	r, err = u.Do("get big\r\n")
	mustReply(t, r, err, "VALUE big 0 1100\r\n"+big+"\r\nEND\r\n")
	if e.counter(t, "oversize") == 0 {
		t.Fatal("oversize value not counted")
	}
	st, err := e.srv.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pool.LeakedBlocks != 0 {
		t.Fatalf("leaked blocks: %+v", st.Pool)
	}
	if n, ok := st.Counters["driver_xdp_tx_errors"]; !ok || n != 0 {
		t.Fatalf("driver_xdp_tx_errors %d (reported: %v): the veth dropped replies", n, ok)
	}
	t.Logf("counters %v", st.Counters)
}

// TestConsistencyAfterAck checks the rule: once memcached acknowledged a set
// or delete, no GET answered from the kernel returns an older value. A writer
// alternates TCP and UDP sets (and deletes) of one hot key, waiting for each
// acknowledgement; readers hammer it over UDP, so misses, fills and hits
// interleave with the writes. Each reply must be at least as new as the
// newest write acknowledged before that GET was sent.
func TestConsistencyAfterAck(t *testing.T) {
	// Default write window and fill quarantine: the rule rests on them. They
	// bound how long memcached may hold a request or a value it read; in an
	// emulated guest every step takes 10-30 times longer, so they widen with
	// testenv.TimeScale() as the server's own delays do.
	ts := testenv.TimeScale()
	quarantine := 50 * time.Millisecond * ts
	e := newKVEnv(t, "kvcons", Config{WriteWindow: time.Millisecond * ts, FillQuarantine: quarantine})
	w, tc := e.udp(t), e.tcp(t)
	var acked atomic.Int64 // version of the newest acknowledged write; -1 = deleted
	deadline := time.Now().Add(3 * time.Second * min(ts, 3))
	// Past the deadline the writes go on until a fill and a rejected fill
	// have both happened (a busy machine may manage only a burst or two of
	// writes in 3 s), at most three times as long.
	hard := time.Now().Add(9 * time.Second * min(ts, 3))
	var stop atomic.Bool
	defer stop.Store(true) // the readers stop too if a write fails the test
	enough := func() bool {
		now := time.Now()
		if now.After(hard) {
			return true
		}
		if now.Before(deadline) {
			return false
		}
		c, _ := e.srv.Counters()
		return c["hits"] > 0 && c["fills"] > 0 && c["fill_rejected"] > 0
	}
	var wg sync.WaitGroup
	var violations, reads, deletedReads atomic.Int64
	var firstViolation atomic.Value
	for g := 0; g < 3; g++ {
		u := e.udp(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				floor := acked.Load()
				r, err := u.Do("get hot\r\n")
				if err != nil {
					continue
				}
				reads.Add(1)
				if r == "END\r\n" { // only memcached answers END: never stale
					deletedReads.Add(1)
					continue
				}
				var flags, n int
				var v int64
				if _, err := fmt.Sscanf(r, "VALUE hot %d %d\r\nv%d", &flags, &n, &v); err != nil {
					violations.Add(1)
					firstViolation.CompareAndSwap(nil, "malformed "+r)
					continue
				}
				if floor > 0 && v < floor {
					violations.Add(1)
					firstViolation.CompareAndSwap(nil, fmt.Sprintf("read v%d after v%d was acknowledged", v, floor))
				}
			}
		}()
	}
	var version int64
	for !enough() {
		version++
		val := fmt.Sprintf("v%08d", version)
		var r string
		var err error
		if version%2 == 0 {
			r, err = tc.cmd(fmt.Sprintf("set hot 0 0 %d\r\n%s\r\n", len(val), val))
		} else {
			// Sent once: a resent UDP set could be applied after the
			// next (TCP) write, making memcached itself return an
			// older value.
			r, err = w.Once(fmt.Sprintf("set hot 0 0 %d\r\n%s\r\n", len(val), val), 3*time.Second*ts)
		}
		if err != nil || r != "STORED\r\n" {
			t.Fatalf("set v%d: %q %v", version, r, err)
		}
		acked.Store(version)
		// Bursts of writes, then a pause longer than the fill quarantine so
		// that misses fill the kernel again between bursts.
		if version%20 == 0 {
			time.Sleep(quarantine * 12 / 5)
		} else {
			time.Sleep(time.Duration(version%3) * time.Millisecond)
		}
	}
	stop.Store(true)
	wg.Wait()
	c, _ := e.srv.Counters()
	t.Logf("%d writes, %d reads (%d END); kernel hits %d misses %d fills %d fill_rejected %d write_conflicts %d",
		version, reads.Load(), deletedReads.Load(), c["hits"], c["misses"], c["fills"], c["fill_rejected"], c["write_conflicts"])
	if violations.Load() != 0 {
		t.Fatalf("%d violations; first: %v", violations.Load(), firstViolation.Load())
	}
	if c["hits"] == 0 || c["fills"] == 0 || c["fill_rejected"] == 0 {
		t.Fatal("hits, fills and rejected fills must all happen for the test to mean something")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
