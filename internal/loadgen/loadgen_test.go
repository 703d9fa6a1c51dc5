package loadgen_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/cistern-ebpf/cistern/internal/loadgen"
	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// bed is a real memcached in a server namespace and a client created in
// the client namespace, plus a plain UDP socket there to tamper with keys.
type bed struct {
	c    *loadgen.Client
	raw  *net.UDPConn
	pair *netenv.Pair
	// drops: datagrams the kernel dropped at a full socket receive buffer
	// in the two namespaces (only this test's sockets live there) during
	// the last run.
	drops uint64
}

// rcvbufErrors is Udp RcvbufErrors of namespace ns: datagrams dropped
// because the receiving socket's buffer was full, i.e. its reader (the
// server, or the load generator's reply reader) did not get a CPU in time.
func rcvbufErrors(t *testing.T, ns netns.NsHandle) uint64 {
	var n uint64
	err := netenv.Do(ns, func() error {
		// thread-self: /proc/self/net is the thread group leader's netns.
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var names []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i, name := range names {
				if name == "RcvbufErrors" && i < len(f) {
					n, err = strconv.ParseUint(f[i], 10, 64)
					return err
				}
			}
		}
		return fmt.Errorf("no Udp RcvbufErrors in /proc/net/snmp")
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bed) udpDrops(t *testing.T) uint64 {
	return rcvbufErrors(t, b.pair.ServerNS) + rcvbufErrors(t, b.pair.ClientNS)
}

func setup(t *testing.T, name string, cfg loadgen.Config) *bed {
	t.Helper()
	// A UDP flood: not beside another package's flood or --all capture.
	testenv.Exclusive(t, testenv.Traffic)
	pair := testenv.NetPair(t, name)
	const port = 11211
	testenv.Memcached(t, servers.MemcachedOptions{Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: port})
	cfg.Server = &net.UDPAddr{IP: pair.ServerIP, Port: port}
	b := &bed{pair: pair}
	err := netenv.Do(pair.ClientNS, func() error {
		var err error
		if b.c, err = loadgen.New(cfg); err != nil {
			return err
		}
		b.raw, err = net.DialUDP("udp", nil, cfg.Server)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.c.Close()
		b.raw.Close()
	})
	return b
}

// do sends one memcached UDP request on the raw socket and returns the
// reply's text.
func (b *bed) do(t *testing.T, req string) string {
	t.Helper()
	dgram := binary.BigEndian.AppendUint16(nil, 0x4242)
	dgram = append(dgram, 0, 0, 0, 1, 0, 0)
	dgram = append(dgram, req...)
	buf := make([]byte, 4096)
	for try := 0; try < 5; try++ {
		if _, err := b.raw.Write(dgram); err != nil {
			t.Fatal(err)
		}
		b.raw.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := b.raw.Read(buf)
		if err == nil && n >= 8 {
			return string(buf[8:n])
		}
	}
	t.Fatalf("no reply to %q", req)
	return ""
}

// set stores value under key number k behind the load generator's back.
func (b *bed) set(t *testing.T, k int, flags uint32, value []byte) {
	t.Helper()
	req := fmt.Sprintf("set %s %d 0 %d\r\n%s\r\n", loadgen.Key(k), flags, len(value), value)
	if got := b.do(t, req); got != "STORED\r\n" {
		t.Fatalf("set %s: %q", loadgen.Key(k), got)
	}
}

func (b *bed) preload(t *testing.T) loadgen.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.c.Preload(ctx)
	t.Logf("preload: %v", res)
	if err != nil {
		t.Fatal(err)
	}
	if keys := uint64(b.c.Config().Keys); res.Sets < keys {
		t.Fatalf("preload acknowledged %d SETs for %d keys", res.Sets, keys)
	}
	if res.WrongValues+res.StaleValues+res.Unexpected != 0 {
		t.Fatalf("preload: %v", res)
	}
	return res
}

func (b *bed) run(t *testing.T, p loadgen.Phase) loadgen.Result {
	t.Helper()
	d0 := b.udpDrops(t)
	res, err := b.c.RunPhase(context.Background(), p)
	b.drops = b.udpDrops(t) - d0
	t.Logf("run %+v: %v; kernel dropped %d datagrams at full receive buffers", p, res, b.drops)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkClean fails on any wrong, stale or erroneous reply and on more than
// a trace of losses (a correct server never returns a wrong value). UDP
// drops a datagram when its receiver's socket buffer is full: on a loaded
// machine (go test runs packages in parallel beside other work) memcached
// or the reply reader waits for a CPU and the kernel counts those drops
// (Udp RcvbufErrors, in namespaces only this test uses), or the reply
// comes after the request was retired (Late). Those are explained; a loss
// beyond them (a request never sent, a reply not
// matched) still fails at more than 1%.
func (b *bed) checkClean(t *testing.T, res loadgen.Result) {
	t.Helper()
	if res.WrongValues != 0 || res.StaleValues != 0 || res.Errors != 0 {
		t.Errorf("wrong=%d stale=%d errors=%d (unexpected=%d)", res.WrongValues, res.StaleValues, res.Errors, res.Unexpected)
	}
	// A Late reply is the answer to a request retired as lost after
	// Timeout (200 ms): the server answered, the CPU came late (seen:
	// lost=64 late=64, p99 400 ms, kernel drops 0, at load 23 on 2 CPUs).
	explained := b.drops + res.Late
	unexplained := res.Lost
	if explained >= unexplained {
		unexplained = 0
	} else {
		unexplained -= explained
	}
	if unexplained > res.Ops/100 {
		t.Errorf("%d requests lost for %d answered (%d datagrams dropped by the kernel at a full receive buffer, %d replies late)", res.Lost, res.Ops, b.drops, res.Late)
	} else if res.Lost > res.Ops/100 {
		t.Logf("%d requests lost for %d answered: explained by %d kernel drops at full receive buffers and %d late replies (CPU starvation)", res.Lost, res.Ops, b.drops, res.Late)
	}
	if res.Ops == 0 || res.OpsPerSec <= 0 || res.P50 <= 0 || res.P99 < res.P50 || res.P999 < res.P99 || res.Max < res.P999 {
		t.Errorf("implausible result: %v", res)
	}
}

// TestPreloadThenGet is the GET-only phase of the benchmark: every key set
// once, then zipfian GETs that must all hit with the right value.
func TestPreloadThenGet(t *testing.T) {
	var progress atomic.Uint64
	var calls atomic.Int32
	b := setup(t, "lgget", loadgen.Config{Keys: 100000, Seed: 1, Progress: func(done uint64) {
		calls.Add(1)
		progress.Store(done)
	}})
	b.preload(t)
	calls.Store(0)
	res := b.run(t, loadgen.Phase{GetRatio: 1, Duration: 1500 * time.Millisecond})
	b.checkClean(t, res)
	if res.Sets != 0 || res.Gets != res.Ops || res.Hits != res.Gets || res.Misses != 0 {
		t.Errorf("GET-only after preload: %v", res)
	}
	if n := calls.Load(); n < 5 || n > 20 {
		t.Errorf("Progress called %d times in 1.5s", n)
	}
	if progress.Load() != res.Ops {
		t.Errorf("last progress %d, ops %d", progress.Load(), res.Ops)
	}
	t.Logf("GET-only against memcached: %.0f ops/s", res.OpsPerSec)

	// An op-count phase issues exactly that many requests.
	res = b.run(t, loadgen.Phase{Ops: 5003})
	b.checkClean(t, res)
	if res.Sent != 5003 || res.Ops+res.Lost != 5003 {
		t.Errorf("5003-op phase: %v", res)
	}
}

// TestMixed is the 95/5 phase: with SETs racing GETs on hot keys, no value
// may be wrong or older than an acknowledged SET.
func TestMixed(t *testing.T) {
	b := setup(t, "lgmix", loadgen.Config{Keys: 20000, Seed: 2, Scrambled: true})
	b.preload(t)
	res := b.run(t, loadgen.Phase{GetRatio: 0.95, Duration: 1500 * time.Millisecond})
	b.checkClean(t, res)
	if res.Sets == 0 || res.Misses != 0 {
		t.Errorf("mixed: %v", res)
	}
	if frac := float64(res.Sets) / float64(res.Ops); frac < 0.03 || frac > 0.06 {
		t.Errorf("%.3f of the requests were SETs, want about 0.05", frac)
	}
	// Read back what the SETs wrote, at the higher skew of the paper.
	res = b.run(t, loadgen.Phase{GetRatio: 1, Ops: 20000})
	b.checkClean(t, res)

	// A context that ends stops the phase at once.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := b.c.RunPhase(ctx, loadgen.Phase{GetRatio: 0.95, Duration: time.Minute})
	if err == nil || time.Since(start) > 5*time.Second || res.Ops == 0 {
		t.Errorf("cancelled phase: err %v after %v, %v", err, time.Since(start), res)
	}
	// And the client is still usable after.
	b.checkClean(t, b.run(t, loadgen.Phase{GetRatio: 0.95, Ops: 10000}))
}

// TestDetectsBadValues plants bad values in memcached behind the load
// generator's back and checks that each is counted as what it is.
func TestDetectsBadValues(t *testing.T) {
	const keys = 64
	b := setup(t, "lgbad", loadgen.Config{Keys: keys, Workers: 2, Depth: 8, Seed: 3, Skew: -1})
	b.preload(t)
	b.checkClean(t, b.run(t, loadgen.Phase{Ops: 2000}))

	restore := func(k int) {
		b.set(t, k, loadgen.KeyFlags(k), loadgen.AppendValue(nil, k, b.c.AckedVersion(k), b.c.ValueSize(k)))
	}
	same := -1 // a key of the same size as key 0
	for k := 1; k < keys; k++ {
		if b.c.ValueSize(k) == b.c.ValueSize(0) {
			same = k
			break
		}
	}
	size := b.c.ValueSize(0)
	good := loadgen.AppendValue(nil, 0, 1, size)
	newer := loadgen.AppendValue(nil, 0, 2, size)
	corrupt := append([]byte{}, good...)
	corrupt[size/2] ^= 1
	torn := append(append([]byte{}, good[:size/2]...), newer[size/2:]...)
	for _, tc := range []struct {
		name  string
		plant func()
		count func(loadgen.Result) uint64
	}{
		{"stale (version 0 after version 1 was acknowledged)", func() { b.set(t, 0, loadgen.KeyFlags(0), loadgen.AppendValue(nil, 0, 0, size)) }, func(r loadgen.Result) uint64 { return r.StaleValues }},
		{"corrupt", func() { b.set(t, 0, loadgen.KeyFlags(0), corrupt) }, func(r loadgen.Result) uint64 { return r.WrongValues }},
		{"torn", func() { b.set(t, 0, loadgen.KeyFlags(0), torn) }, func(r loadgen.Result) uint64 { return r.WrongValues }},
		{"version never written", func() { b.set(t, 0, loadgen.KeyFlags(0), loadgen.AppendValue(nil, 0, 9, size)) }, func(r loadgen.Result) uint64 { return r.WrongValues }},
		{"wrong length", func() { b.set(t, 0, loadgen.KeyFlags(0), good[:size-1]) }, func(r loadgen.Result) uint64 { return r.WrongValues }},
		{"wrong flags", func() { b.set(t, 0, loadgen.KeyFlags(0)+1, good) }, func(r loadgen.Result) uint64 { return r.WrongValues }},
		{"another key's value", func() { b.set(t, 0, loadgen.KeyFlags(0), loadgen.AppendValue(nil, same, 1, size)) }, func(r loadgen.Result) uint64 { return r.WrongValues }},
		{"miss", func() {
			if got := b.do(t, "delete "+loadgen.Key(0)+"\r\n"); got != "DELETED\r\n" {
				t.Fatalf("delete: %q", got)
			}
		}, func(r loadgen.Result) uint64 { return r.Misses }},
	} {
		tc.plant()
		res := b.run(t, loadgen.Phase{GetRatio: 1, Ops: 2000})
		// Key 0 gets 1/64 of 2000 uniform GETs; only they are bad.
		bad := res.WrongValues + res.StaleValues + res.Misses
		if n := tc.count(res); n == 0 || n != bad || bad > res.Gets/8 || res.Errors != 0 {
			t.Errorf("%s: %v", tc.name, res)
		}
		restore(0)
		if res := b.run(t, loadgen.Phase{GetRatio: 1, Ops: 2000}); res.WrongValues+res.StaleValues+res.Misses+res.Errors != 0 {
			t.Fatalf("after restoring key 0: %v", res)
		}
	}
}

// TestNoServer checks that requests to a port nobody listens on are lost
// or refused, not mistaken for replies, and that Preload says so.
func TestNoServer(t *testing.T) {
	pair := testenv.NetPair(t, "lgnone")
	var c *loadgen.Client
	err := netenv.Do(pair.ClientNS, func() error {
		var err error
		c, err = loadgen.New(loadgen.Config{Server: &net.UDPAddr{IP: pair.ServerIP, Port: 11299}, Keys: 10, Workers: 1, Depth: 4, Timeout: 20 * time.Millisecond})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Preload(context.Background())
	t.Logf("preload: %v: %v", res, err)
	if err == nil || res.Ops != 0 {
		t.Errorf("preload without a server: %v, %v", res, err)
	}
	res, err = c.RunPhase(context.Background(), loadgen.Phase{Ops: 100})
	t.Logf("run: %v: %v", res, err)
	if err != nil || res.Ops != 0 || res.Lost+res.Errors == 0 {
		t.Errorf("run without a server: %v, %v", res, err)
	}
}
