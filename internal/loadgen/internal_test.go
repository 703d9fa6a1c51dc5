package loadgen

import (
	"math"
	"net"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for v := int64(1); v <= 100000; v++ {
		h.record(v * 1000) // 1µs .. 100ms, uniform
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		want := q * 100000 * 1000
		got := float64(h.quantile(q))
		if math.Abs(got-want) > want/subCount {
			t.Errorf("q%v = %v, want %v within 1/%d", q, time.Duration(got), time.Duration(want), subCount)
		}
	}
	if h.max != 100000*1000 || h.mean() != time.Duration(50000500) {
		t.Errorf("max %d mean %v", h.max, h.mean())
	}
	var g histogram
	g.record(5)
	g.merge(&h)
	if g.n != h.n+1 || g.quantile(0) != 5 {
		t.Errorf("merge: n %d, min %v", g.n, g.quantile(0))
	}
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1 << 40, math.MaxUint64} {
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d", v, i)
		}
		if mid := bucketMid(i); float64(mid) < float64(v)*(1-1.0/subCount)-1 || float64(mid) > float64(v)*(1+1.0/subCount)+1 {
			t.Errorf("value %d in bucket %d of middle %d", v, i, mid)
		}
	}
}

func TestRequests(t *testing.T) {
	b := make([]byte, frameLen, 128)
	putFrame(b, 0xbeef)
	b = appendGet(b, []byte("0000abcd"))
	if want := "\xbe\xef\x00\x00\x00\x01\x00\x00get 0000abcd\r\n"; string(b) != want {
		t.Errorf("get request %q, want %q", b, want)
	}
	s := appendSetHead(nil, []byte("0000abcd"), 65535, 1024)
	if want := "set 0000abcd 65535 0 1024\r\n"; string(s) != want {
		t.Errorf("set request %q, want %q", s, want)
	}
	if len(s)+frameLen+1024+2 > maxSetLen(1024) {
		t.Errorf("maxSetLen(1024) = %d too small", maxSetLen(1024))
	}
}

func TestParseGetReply(t *testing.T) {
	key := []byte("00000007")
	for _, tc := range []struct {
		body  string
		want  reply
		flags uint32
		data  string
	}{
		{"END\r\n", replyMiss, 0, ""},
		{"VALUE 00000007 7 5\r\nhello\r\nEND\r\n", replyHit, 7, "hello"},
		{"VALUE 00000007 4294967295 0\r\n\r\nEND\r\n", replyHit, 0xffffffff, ""},
		{"VALUE 00000007 0 7\r\nhe\r\nllo\r\nEND\r\n", replyHit, 0, "he\r\nllo"},
		{"VALUE 00000008 7 5\r\nhello\r\nEND\r\n", replyOtherKey, 7, "hello"},
		{"VALUE 00000007 7 5\r\nhell\r\nEND\r\n", replyBad, 0, ""},
		{"VALUE 00000007 7 5\r\nhello!\r\nEND\r\n", replyBad, 0, ""},
		{"VALUE 00000007 7 5\r\nhello\r\nEND\r\nEND\r\n", replyBad, 0, ""},
		{"VALUE 00000007 7 5\r\nhello\r\n", replyBad, 0, ""},
		{"VALUE 00000007 7 5 12\r\nhello\r\nEND\r\n", replyBad, 0, ""},
		{"VALUE 00000007 4294967296 5\r\nhello\r\nEND\r\n", replyBad, 0, ""},
		{"VALUE 00000007  5\r\nhello\r\nEND\r\n", replyBad, 0, ""},
		{"VALUE 00000007 7 99999999999999999999\r\nhello\r\nEND\r\n", replyBad, 0, ""},
		{"VALUE  7 5\r\nhello\r\nEND\r\n", replyBad, 0, ""},
		{"SERVER_ERROR out of memory\r\n", replyBad, 0, ""},
		{"STORED\r\n", replyBad, 0, ""},
		{"", replyBad, 0, ""},
	} {
		r, flags, data := parseGetReply([]byte(tc.body), key)
		if r != tc.want || (r != replyBad && (flags != tc.flags || string(data) != tc.data)) {
			t.Errorf("%q: got %v %d %q, want %v %d %q", tc.body, r, flags, data, tc.want, tc.flags, tc.data)
		}
	}
}

// TestScrambleAndTables needs no server: a connected UDP socket sends
// nothing until asked.
func TestScrambleAndTables(t *testing.T) {
	cfg := Config{Server: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, Keys: 5000, Scrambled: true, Seed: 11, Workers: 2}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := make([]bool, cfg.Keys)
	moved := 0
	for r, k := range c.perm {
		if seen[k] {
			t.Fatalf("key %d twice in the permutation", k)
		}
		seen[k] = true
		if int(k) != r {
			moved++
		}
	}
	if moved < cfg.Keys/2 {
		t.Errorf("scrambling moved only %d of %d keys", moved, cfg.Keys)
	}
	c2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for i := range c.perm {
		if c.perm[i] != c2.perm[i] {
			t.Fatal("same seed, different permutation")
		}
	}
	if string(c.key(4999)) != "00001387" || c.ValueSize(3) != DefaultValueSize(3) {
		t.Errorf("key 4999 %q, size of key 3 %d", c.key(4999), c.ValueSize(3))
	}
	got := c.Config()
	if got.Depth != 32 || got.Batch != 16 || got.Timeout != 200*time.Millisecond || got.Skew != 0.99 {
		t.Errorf("defaults not applied: %+v", got)
	}
	for _, bad := range []Config{
		{},
		{Server: cfg.Server, Depth: 5000},
		{Server: cfg.Server, GetRatio: 1.5},
		{Server: cfg.Server, Keys: 10, ValueSize: func(int) int { return 8 }},
	} {
		if c, err := New(bad); err == nil {
			c.Close()
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}

// TestHotPathAllocations checks that building and checking requests and
// replies does not allocate (recvmmsg itself allocates one source address
// per datagram in x/net, which is out of our hands).
func TestHotPathAllocations(t *testing.T) {
	c, err := New(Config{Server: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, Keys: 1000, Workers: 1, GetRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := c.workers[0]
	p := &phase{getRatio: 0.5}
	w.reset(p, 0)
	reply := []byte("\x00\x00\x00\x00\x00\x01\x00\x00VALUE 00000000 0 128\r\n" + string(AppendValue(nil, 0, 0, 128)) + "\r\nEND\r\n")
	allocs := testing.AllocsPerRun(1000, func() {
		si := w.free[len(w.free)-1]
		s := &w.slots[si]
		w.prepare(p, s)
		w.free = w.free[:len(w.free)-1]
		w.inflight++
		w.enqueue(si)
		w.sendq = w.sendq[:0]
		reply[0], reply[1] = byte(s.id>>8), byte(s.id)
		w.handle(p, reply, mono())
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request", allocs)
	}
}
