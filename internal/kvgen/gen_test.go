package kvgen

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/loadgen"
	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

func TestBuckets(t *testing.T) {
	for _, ns := range []uint64{0, 3, 4, 5, 7, 8, 100, 1000, 12345, 1 << 30} {
		lo, hi := BucketBounds(bucketOf(ns))
		if ns < lo || ns >= hi {
			t.Errorf("%d ns in bucket %d = [%d, %d)", ns, bucketOf(ns), lo, hi)
		}
	}
}

func testConfig(keys int) Config {
	return Config{
		Keys: keys, Skew: 0.99, Seed: 1, StreamLen: 1 << 12,
		ClientMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, ServerMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		ClientIP: net.IPv4(10, 0, 0, 2), ServerIP: net.IPv4(10, 0, 0, 1),
	}
}

// reply is a frame memcached would send to a kvgen request for key k.
func reply(c Config, text []byte) []byte {
	f := Template(c)[:42]
	copy(f[0:6], c.ClientMAC)
	copy(f[6:12], c.ServerMAC)
	binary.BigEndian.PutUint16(f[34:], c.Port)
	binary.BigEndian.PutUint16(f[36:], 0x8123)
	f = append(f, 0x45, 0x67, 0, 0, 0, 1, 0, 0)
	return append(f, text...)
}

// TestCounterChecksValues runs kvgen_count on replies: right values count
// as hits, any byte changed or a wrong length as wrong, END as a miss.
func TestCounterChecksValues(t *testing.T) {
	testenv.RequireRoot(t)
	if err := kernel.XDPLiveFrames(); err != nil {
		t.Skipf("skipped: %v", err) // not a missing tool: a kernel without XDP live frames (before 5.18)
	}
	c := testConfig(100)
	g, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	run := func(frame []byte) {
		t.Helper()
		ret, err := g.objs.KvgenCount.Run(&ebpf.RunOptions{Data: frame})
		if err != nil || ret != 1 { // XDP_DROP
			t.Fatalf("kvgen_count: %d, %v", ret, err)
		}
	}
	for k := range 100 {
		run(reply(g.cfg, ReplyText(k, 1, loadgen.DefaultValueSize(k))))
	}
	good := ReplyText(7, 1, loadgen.DefaultValueSize(7))
	for _, bad := range [][]byte{
		func() []byte { b := append([]byte(nil), good...); b[len(b)-20] ^= 1; return b }(),
		func() []byte { b := append([]byte(nil), good...); b[len(b)-9] ^= 1; return b }(), // the zero-padded tail
		func() []byte { b := append([]byte(nil), good...); b[30] ^= 1; return b }(),       // in the first 64-byte chunk
		func() []byte { // two words swapped: the sum is order-sensitive
			b := append([]byte(nil), good...)
			var w [8]byte
			copy(w[:], b[64:72])
			copy(b[64:72], b[72:80])
			copy(b[72:80], w[:])
			return b
		}(),
		good[:len(good)-1],
		ReplyText(7, 2, loadgen.DefaultValueSize(7)), // another version
	} {
		run(reply(g.cfg, bad))
	}
	run(reply(g.cfg, []byte("END\r\n")))
	st, err := g.counters()
	if err != nil {
		t.Fatal(err)
	}
	if st[statHits] != 100 || st[statWrong] != 6 || st[statMisses] != 1 || st[statReplies] != 107 {
		t.Errorf("hits %d wrong %d misses %d replies %d; want 100, 6, 1, 107", st[statHits], st[statWrong], st[statMisses], st[statReplies])
	}
}

// TestAgainstMemcached sends GETs at a real memcached through the kernel
// generator, then runs the reflector: every value must check out.
func TestAgainstMemcached(t *testing.T) {
	testenv.RequireRoot(t)
	if err := kernel.XDPLiveFrames(); err != nil {
		t.Skipf("skipped: %v", err) // not a missing tool: a kernel without XDP live frames (before 5.18)
	}
	pair := testenv.NetPair(t, "kvgen")
	mc := testenv.Memcached(t, servers.MemcachedOptions{Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: 11211, Threads: 1, MemoryMB: 64})
	_ = mc
	const keys = 2000
	var lc *loadgen.Client
	err := netenv.Do(pair.ClientNS, func() (err error) {
		lc, err = loadgen.New(loadgen.Config{Server: &net.UDPAddr{IP: pair.ServerIP, Port: 11211}, Workers: 1, Keys: keys, Seed: 1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	lc.Close()
	c := testConfig(keys)
	c.ClientMAC, c.ServerMAC, c.ClientIP, c.ServerIP = pair.ClientMAC, pair.ServerMAC, pair.ClientIP, pair.ServerIP
	g, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	err = netenv.Do(pair.ClientNS, func() error {
		l, err := g.AttachCounter(pair.ClientIfindex)
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := RunOptions{Ifindex: pair.ClientIfindex, Duration: 300 * time.Millisecond, Threads: 1,
		InNS: func(fn func() error) error { return netenv.Do(pair.ClientNS, fn) }}
	for _, mode := range []string{"memcached", "reflector"} {
		var attach func(int) (interface{ Close() error }, error)
		if mode == "memcached" {
			attach = func(i int) (interface{ Close() error }, error) { return g.AttachPass(i) }
		} else {
			attach = func(i int) (interface{ Close() error }, error) { return g.AttachReflector(i) }
		}
		var l interface{ Close() error }
		if err := netenv.Do(pair.ServerNS, func() (err error) { l, err = attach(pair.ServerIfindex); return err }); err != nil {
			t.Fatal(err)
		}
		res, err := g.Run(context.Background(), opts)
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", mode, res)
		if res.Wrong != 0 || res.Replies == 0 || res.LatencyCount == 0 || res.P99 <= 0 {
			t.Errorf("%s: %+v: want replies, latencies and no wrong value", mode, res)
		}
		if mode == "memcached" && (res.Hits == 0 || res.Misses != 0 || res.Other != 0) {
			t.Errorf("memcached: %d hits, %d misses, %d other: every key was preloaded", res.Hits, res.Misses, res.Other)
		}
		if mode == "reflector" && res.Other == 0 {
			t.Errorf("reflector: no echoed request counted")
		}
	}
}
