package kv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// XDP and TC verdicts.
const (
	xdpDrop  = 1
	xdpPass  = 2
	xdpTX    = 3
	tcxNext  = uint32(0xffffffff) // TCX_NEXT (-1)
	mcPort   = 11211
	ethIPUDP = 14 + 20 + 8
)

var (
	clientMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	serverMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	clientIP  = net.IPv4(10, 9, 0, 2).To4()
	serverIP  = net.IPv4(10, 9, 0, 1).To4()
)

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// frame builds Ethernet/IPv4/UDP around payload, from client to server
// (toServer) or back.
func udpFrame(sport, dport uint16, payload []byte, toServer bool) []byte {
	b := make([]byte, ethIPUDP+len(payload))
	src, dst, smac, dmac := clientIP, serverIP, clientMAC, serverMAC
	if !toServer {
		src, dst, smac, dmac = serverIP, clientIP, serverMAC, clientMAC
	}
	copy(b[0:6], dmac)
	copy(b[6:12], smac)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	ip[8] = 64
	ip[9] = 17
	copy(ip[12:16], src)
	copy(ip[16:20], dst)
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(b[42:], payload)
	return b
}

// mcRequest is a memcached UDP request datagram (frame header + text).
func mcRequest(reqID uint16, text string) []byte {
	p := make([]byte, 8+len(text))
	binary.BigEndian.PutUint16(p[0:], reqID)
	binary.BigEndian.PutUint16(p[4:], 1)
	copy(p[8:], text)
	return udpFrame(40000, mcPort, p, true)
}

// mcReply is memcached's reply datagram for the egress program.
func mcReply(reqID uint16, text string) []byte {
	p := make([]byte, 8+len(text))
	binary.BigEndian.PutUint16(p[0:], reqID)
	binary.BigEndian.PutUint16(p[4:], 1)
	copy(p[8:], text)
	return udpFrame(mcPort, 40000, p, false)
}

func tcpFrame(seq uint32, payload string) []byte {
	b := make([]byte, 14+20+20+len(payload))
	copy(b[0:6], serverMAC)
	copy(b[6:12], clientMAC)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(40+len(payload)))
	ip[8] = 64
	ip[9] = 6
	copy(ip[12:16], clientIP)
	copy(ip[16:20], serverIP)
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	tcp := b[34:54]
	binary.BigEndian.PutUint16(tcp[0:], 40001)
	binary.BigEndian.PutUint16(tcp[2:], mcPort)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = 5 << 4
	tcp[13] = 0x18 // PSH ACK
	copy(b[54:], payload)
	return b
}

type harness struct {
	t      testing.TB
	srv    *Server
	xdp    *ebpf.Program
	egress *ebpf.Program
}

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	testenv.RequireRoot(t)
	if cfg.PoolMB == 0 {
		cfg.PoolMB = 4
	}
	srv, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	x, e := srv.Programs()
	return &harness{t: t, srv: srv, xdp: x, egress: e}
}

// xdp runs kv_xdp and returns the verdict and the packet after it.
func (h *harness) xdpRun(pkt []byte) (uint32, []byte) {
	h.t.Helper()
	opts := ebpf.RunOptions{Data: pkt, DataOut: make([]byte, 4096)}
	ret, err := h.xdp.Run(&opts)
	if err != nil {
		h.t.Fatalf("XDP test run: %v", err)
	}
	return ret, opts.DataOut
}

func (h *harness) egressRun(pkt []byte) uint32 {
	h.t.Helper()
	ret, err := h.egress.Run(&ebpf.RunOptions{Data: pkt})
	if err != nil {
		h.t.Fatalf("TC test run: %v", err)
	}
	return ret
}

func (h *harness) counters() map[string]uint64 {
	h.t.Helper()
	c, err := h.srv.Counters()
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// set sends a UDP set through XDP; it must pass on to memcached.
func (h *harness) set(key string, flags int, value []byte) {
	h.t.Helper()
	text := fmt.Sprintf("set %s %d 0 %d\r\n%s\r\n", key, flags, len(value), value)
	ret, out := h.xdpRun(mcRequest(1, text))
	if ret != xdpPass {
		h.t.Fatalf("set %s: verdict %d, want pass", key, ret)
	}
	if !bytes.Equal(out, mcRequest(1, text)) {
		h.t.Fatalf("set %s: packet modified on its way to memcached", key)
	}
}

// get sends a UDP get; on a hit it checks the reply frame and returns the value.
func (h *harness) get(reqID uint16, key string) (value []byte, flags int, hit bool) {
	h.t.Helper()
	in := mcRequest(reqID, "get "+key+"\r\n")
	ret, out := h.xdpRun(in)
	switch ret {
	case xdpPass:
		if !bytes.Equal(out, in) {
			h.t.Fatalf("get %s: passed a modified packet", key)
		}
		return nil, 0, false
	case xdpTX:
	default:
		h.t.Fatalf("get %s: verdict %d", key, ret)
	}
	v, f, err := parseReply(in, out, key)
	if err != nil {
		h.t.Fatalf("get %s: bad reply: %v", key, err)
	}
	return v, f, true
}

// parseReply validates the reply XDP built from request in and extracts
// the value.
func parseReply(in, out []byte, key string) ([]byte, int, error) {
	if len(out) < ethIPUDP+8 || len(in) < ethIPUDP+8 {
		return nil, 0, fmt.Errorf("short reply %d", len(out))
	}
	reqID := binary.BigEndian.Uint16(in[42:])
	if !bytes.Equal(out[0:6], in[6:12]) || !bytes.Equal(out[6:12], in[0:6]) {
		return nil, 0, fmt.Errorf("MACs not swapped")
	}
	ip := out[14:34]
	if !bytes.Equal(ip[12:16], in[30:34]) || !bytes.Equal(ip[16:20], in[26:30]) {
		return nil, 0, fmt.Errorf("addresses not swapped")
	}
	if ipChecksum(ip) != 0 {
		return nil, 0, fmt.Errorf("bad IP checksum")
	}
	if int(binary.BigEndian.Uint16(ip[2:])) != len(out)-14 {
		return nil, 0, fmt.Errorf("IP length %d, frame %d", binary.BigEndian.Uint16(ip[2:]), len(out))
	}
	udp := out[34:42]
	if binary.BigEndian.Uint16(udp[0:]) != mcPort || !bytes.Equal(udp[2:4], in[34:36]) {
		return nil, 0, fmt.Errorf("ports not swapped")
	}
	if int(binary.BigEndian.Uint16(udp[4:])) != len(out)-34 {
		return nil, 0, fmt.Errorf("UDP length wrong")
	}
	mc := out[42:50]
	if binary.BigEndian.Uint16(mc[0:]) != reqID || binary.BigEndian.Uint16(mc[2:]) != 0 || binary.BigEndian.Uint16(mc[4:]) != 1 {
		return nil, 0, fmt.Errorf("frame header %x", mc)
	}
	text := string(out[50:])
	var k string
	var flags, n int
	hdrEnd := strings.Index(text, "\r\n")
	if hdrEnd < 0 {
		return nil, 0, fmt.Errorf("no header line in %q", text)
	}
	if _, err := fmt.Sscanf(text[:hdrEnd], "VALUE %s %d %d", &k, &flags, &n); err != nil {
		return nil, 0, fmt.Errorf("header %q: %v", text[:hdrEnd], err)
	}
	if k != key {
		return nil, 0, fmt.Errorf("reply for key %q, asked %q", k, key)
	}
	body := text[hdrEnd+2:]
	if len(body) != n+7 || body[n:] != "\r\nEND\r\n" {
		return nil, 0, fmt.Errorf("body of %d bytes for a %d-byte value", len(body), n)
	}
	return []byte(body[:n]), flags, nil
}

func value(n int, seed byte) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = 'a' + (seed+byte(i*7))%26
	}
	return v
}

func TestXDPSetGetDelete(t *testing.T) {
	h := newHarness(t, Config{})
	for _, n := range []int{0, 1, 127, 128, 129, 500, 1023, 1024} {
		key := fmt.Sprintf("key-%d", n)
		want := value(n, byte(n))
		h.set(key, n*3, want)
		got, flags, hit := h.get(uint16(n+1), key)
		if !hit {
			t.Fatalf("%d-byte value: miss after set", n)
		}
		if !bytes.Equal(got, want) || flags != n*3 {
			t.Fatalf("%d-byte value: got %q flags %d", n, got, flags)
		}
	}
	if _, _, hit := h.get(7, "absent"); hit {
		t.Fatal("hit on a key never set")
	}
	// delete invalidates
	ret, _ := h.xdpRun(mcRequest(9, "delete key-500\r\n"))
	if ret != xdpPass {
		t.Fatalf("delete: verdict %d", ret)
	}
	if _, _, hit := h.get(10, "key-500"); hit {
		t.Fatal("hit after delete")
	}
	// oversize: passes to memcached, counted, old copy invalidated
	h.set("key-1", 0, value(1025, 1))
	if _, _, hit := h.get(11, "key-1"); hit {
		t.Fatal("oversize set left the old value in the kernel")
	}
	c := h.counters()
	if c["hits"] != 8 || c["sets"] != 8 || c["oversize"] != 1 || c["deletes"] != 1 {
		t.Fatalf("counters %v", c)
	}
	st, err := h.srv.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pool.LeakedBlocks != 0 {
		t.Fatalf("leaked %d blocks: %+v", st.Pool.LeakedBlocks, st.Pool)
	}
	t.Logf("pool: %+v", st.Pool)
}

func TestXDPKeyHashCollisionIsNoHit(t *testing.T) {
	h := newHarness(t, Config{})
	h.set("alpha", 0, []byte("one"))
	// Same length, different bytes: whatever their hashes, never a false hit.
	for _, k := range []string{"alphb", "Alpha", "alph", "alpha0"} {
		if _, _, hit := h.get(1, k); hit {
			t.Fatalf("hit for %q after setting alpha", k)
		}
	}
	// Long keys up to memcached's 250 bytes work.
	long := strings.Repeat("k", 250)
	h.set(long, 1, []byte("v"))
	if v, _, hit := h.get(2, long); !hit || string(v) != "v" {
		t.Fatal("250-byte key missed")
	}
}

func TestXDPMalformedPassesAndCounts(t *testing.T) {
	h := newHarness(t, Config{})
	h.set("k", 0, []byte("value"))
	frame := func(seq, total uint16, text string) []byte {
		p := make([]byte, 8+len(text))
		binary.BigEndian.PutUint16(p[2:], seq)
		binary.BigEndian.PutUint16(p[4:], total)
		copy(p[8:], text)
		return udpFrame(40000, mcPort, p, true)
	}
	truncated := mcRequest(1, "get k\r\n")
	truncated = truncated[:ethIPUDP+4] // frame header cut
	binary.BigEndian.PutUint16(truncated[38:], 8+4)
	ipOpts := mcRequest(1, "get k\r\n")
	ipOpts[14] = 0x46
	frag := mcRequest(1, "get k\r\n")
	frag[20] = 0x20 // more fragments
	udpTooLong := mcRequest(1, "get k\r\n")
	binary.BigEndian.PutUint16(udpTooLong[38:], 500)
	cases := []struct {
		name    string
		pkt     []byte
		counter string
	}{
		{"truncated frame header", truncated, "pass_malformed"},
		{"multi-datagram request", frame(0, 2, "get k\r\n"), "multipacket"},
		{"sequence not 0", frame(1, 1, "get k\r\n"), "multipacket"},
		{"key over 250 bytes", mcRequest(1, "get "+strings.Repeat("x", 251)+"\r\n"), "pass_long"},
		{"get without CRLF", mcRequest(1, "get k"), "pass_malformed"},
		{"get with no key", mcRequest(1, "get \r\n"), "pass_syntax"},
		{"trailing bytes after get", mcRequest(1, "get k\r\nxx"), "pass_malformed"},
		{"get with a bare LF (valid, left to memcached)", mcRequest(1, "get k\n"), "unsupported"},
		{"get with extra spaces (valid, left to memcached)", mcRequest(1, "get  k \r\n"), "unsupported"},
		{"multi-key get", mcRequest(1, "get k k\r\n"), "multiget"},
		{"set byte count too big", mcRequest(1, "set j 0 0 10\r\nabc\r\n"), "pass_syntax"},
		{"set byte count too small", mcRequest(1, "set j 0 0 1\r\nabc\r\n"), "pass_syntax"},
		{"set flags not a number", mcRequest(1, "set j x 0 3\r\nabc\r\n"), "pass_syntax"},
		{"set without data CRLF", mcRequest(1, "set j 0 0 3\r\nabcde"), "pass_syntax"},
		{"set without a key flushes", mcRequest(1, "set  \r\n"), "udp_flushes"},
		{"delete without a key flushes", mcRequest(1, "delete \r\n"), "udp_flushes"},
		{"binary junk", mcRequest(1, "\x00\xff\x13\x37garbage\x00"), "pass_syntax"},
		{"unknown command", mcRequest(1, "frobnicate k\r\n"), "pass_syntax"},
		{"gets (needs cas from memcached)", mcRequest(1, "gets k\r\n"), "pass_cas"},
		{"mg (meta get)", mcRequest(1, "mg k v\r\n"), "pass_cas"},
		{"IP options", ipOpts, "unsupported"},
		{"IP fragment", frag, "unsupported"},
		{"UDP length beyond packet", udpTooLong, "pass_malformed"},
	}
	for _, c := range cases {
		before := h.counters()[c.counter]
		ret, out := h.xdpRun(c.pkt)
		if ret != xdpPass {
			t.Errorf("%s: verdict %d, want pass to memcached", c.name, ret)
		}
		if !bytes.Equal(out, c.pkt) {
			t.Errorf("%s: packet modified", c.name)
		}
		if after := h.counters()[c.counter]; after != before+1 {
			t.Errorf("%s: %s went %d -> %d", c.name, c.counter, before, after)
		}
	}
	// The two flushes emptied the kernel copy; memcached's tokenizer
	// splits only on spaces and line ends, so a key of control bytes (as
	// memaslap's, which begin with eight 0x10 bytes) is served.
	if _, _, hit := h.get(3, "k"); hit {
		t.Fatal("k still served after a write the kernel could not parse")
	}
	key := strings.Repeat("\x10", 8) + "\x01key"
	h.set(key, 7, []byte("control"))
	if v, f, hit := h.get(4, key); !hit || string(v) != "control" || f != 7 {
		t.Fatalf("key of control bytes: %q %d %v", v, f, hit)
	}
}

func TestTCPWritesInvalidate(t *testing.T) {
	h := newHarness(t, Config{})
	h.set("a", 0, []byte("1"))
	h.set("b", 0, []byte("2"))
	h.set("c", 0, []byte("3"))
	// A TCP set of a and a delete of b in one segment: both invalidated.
	if ret, _ := h.xdpRun(tcpFrame(1000, "set a 0 0 3\r\nnew\r\ndelete b\r\n")); ret != xdpPass {
		t.Fatalf("tcp verdict %d", ret)
	}
	for _, k := range []string{"a", "b"} {
		if _, _, hit := h.get(1, k); hit {
			t.Fatalf("%s still cached after a TCP write", k)
		}
	}
	if _, _, hit := h.get(1, "c"); !hit {
		t.Fatal("c lost: TCP writes to other keys must not flush it")
	}
	// A value spanning segments: the continuation is skipped, the next
	// command after it is parsed.
	big := strings.Repeat("x", 100)
	h.xdpRun(tcpFrame(5000, "set d 0 0 100\r\n"+big[:40]))
	h.xdpRun(tcpFrame(5000+uint32(len("set d 0 0 100\r\n"))+40, big[40:]+"\r\ndelete c\r\n"))
	if _, _, hit := h.get(1, "c"); hit {
		t.Fatal("delete after a multi-segment value was missed")
	}
	if h.counters()["tcp_flushes"] != 0 {
		t.Fatalf("unexpected flush: %v", h.counters())
	}
	// An unparsable segment flushes everything.
	h.set("e", 0, []byte("5"))
	h.xdpRun(tcpFrame(9000, "\x00garbage"))
	if _, _, hit := h.get(1, "e"); hit {
		t.Fatal("e survived a flush")
	}
	if h.counters()["tcp_flushes"] != 1 {
		t.Fatalf("tcp_flushes %v", h.counters())
	}
}

func TestEgressFill(t *testing.T) {
	h := newHarness(t, Config{FillQuarantine: 1})
	// No GET missed on k: memcached's reply (to someone else) is not stored.
	if ret := h.egressRun(mcReply(1, "VALUE k 3 5\r\nhello\r\nEND\r\n")); ret != tcxNext {
		t.Fatalf("egress verdict %d", ret)
	}
	if _, _, hit := h.get(2, "k"); hit {
		t.Fatal("filled without a miss")
	}
	// That GET missed: now the reply fills.
	h.egressRun(mcReply(2, "VALUE k 3 5\r\nhello\r\nEND\r\n"))
	v, flags, hit := h.get(3, "k")
	if !hit || string(v) != "hello" || flags != 3 {
		t.Fatalf("after fill: %q %d %v", v, flags, hit)
	}
	// A miss, then a write, then the (older) reply: refused.
	h.get(4, "m")
	h.set("m", 0, []byte("new"))
	ret, _ := h.xdpRun(mcRequest(5, "delete m\r\n"))
	_ = ret
	h.egressRun(mcReply(4, "VALUE m 0 3\r\nold\r\nEND\r\n"))
	if v, _, hit := h.get(6, "m"); hit {
		t.Fatalf("stale fill served %q", v)
	}
	if h.counters()["fill_rejected"] == 0 {
		t.Fatalf("no fill_rejected: %v", h.counters())
	}
	// Not a value reply, or a multi-value reply: ignored.
	h.get(7, "z")
	h.egressRun(mcReply(7, "END\r\n"))
	h.egressRun(mcReply(7, "VALUE z 0 1\r\na\r\nVALUE y 0 1\r\nb\r\nEND\r\n"))
	if _, _, hit := h.get(8, "z"); hit {
		t.Fatal("filled from a malformed reply")
	}
}

// TestSixtyFourBlocks uses the 64-block build: a 3000-byte value chained
// over 47 blocks of 64 bytes.
func TestSixtyFourBlocks(t *testing.T) {
	h := newHarness(t, Config{BlockSize: 64, MaxBlocks: 64})
	want := value(3000, 9)
	h.set("wide", 1, want)
	got, _, hit := h.get(1, "wide")
	if !hit || !bytes.Equal(got, want) {
		t.Fatalf("3000-byte value over 47 blocks: hit %v, %d bytes", hit, len(got))
	}
	st, err := h.srv.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pool.LiveBlocks != 47 || st.Pool.LeakedBlocks != 0 {
		t.Fatalf("pool %+v", st.Pool)
	}
	if _, err := Load(Config{MaxBlocks: 65}); err == nil {
		t.Fatal("65 blocks per value accepted")
	}
}

// TestEvictionWhenFull fills a tiny pool: the oldest values are evicted
// (FIFO), the newest stay, nothing leaks, and the counters say so.
func TestEvictionWhenFull(t *testing.T) {
	// 32 blocks of 128 B; values of 300 B take 3 blocks, so 10 fit.
	testenv.RequireRoot(t)
	cfg := Config{MaxObjects: 64, WriteWindow: 1}
	cfg.defaults()
	srv, err := loadWithCapacity(cfg, 32)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	x, e := srv.Programs()
	h := &harness{t: t, srv: srv, xdp: x, egress: e}
	for i := 0; i < 30; i++ {
		h.set(fmt.Sprintf("e%02d", i), 0, value(300, byte(i)))
	}
	c := h.counters()
	if c["evictions"] < 20 || c["pool_full"] != 0 {
		t.Fatalf("counters %v", c)
	}
	for i := 27; i < 30; i++ { // the newest are resident
		if v, _, hit := h.get(1, fmt.Sprintf("e%02d", i)); !hit || !bytes.Equal(v, value(300, byte(i))) {
			t.Fatalf("e%02d not resident after evictions", i)
		}
	}
	if _, _, hit := h.get(1, "e00"); hit {
		t.Fatal("the oldest value survived a full pool")
	}
	st, err := srv.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pool.LeakedBlocks != 0 || st.Pool.LiveBlocks > 32 {
		t.Fatalf("pool %+v", st.Pool)
	}
}

// TestXDPReplySizes checks every byte of replies built by the direct packet
// stores (blocks up to 256 bytes copied in words, larger ones with a helper
// call) for keys, flags and values whose lengths fall on and around word and
// block edges: each piece's last word spills into the next one.
func TestXDPReplySizes(t *testing.T) {
	for _, cfg := range []Config{
		{BlockSize: 16, MaxBlocks: 64},
		{BlockSize: 128, MaxBlocks: 8},
		{BlockSize: 256, MaxBlocks: 4},
		{BlockSize: 512, MaxBlocks: 2},
		{Mode: ModeFixed, SlotSize: 1024},
	} {
		// Keys repeat (one byte long has few): a second set of a key
		// within the write window would invalidate it instead.
		cfg.WriteWindow = time.Nanosecond
		h := newHarness(t, cfg)
		bs := int(cfg.BlockSize)
		if cfg.Mode == ModeFixed {
			bs = int(cfg.SlotSize)
		}
		id := uint16(1)
		for _, klen := range []int{1, 7, 8, 9, 250} {
			for _, flags := range []int{0, 12345, 4294967295} {
				for _, n := range []int{0, 1, 7, 8, 9, 127, 128, 129, bs - 1, bs, bs + 1, 1023, 1024} {
					if n < 0 || n > 1024 {
						continue
					}
					key := strings.Repeat(string(rune('a'+klen%26)), klen-1) + fmt.Sprint(n%10)
					want := value(n, byte(n+klen))
					h.set(key, flags, want)
					id++
					got, f, hit := h.get(id, key)
					if !hit || !bytes.Equal(got, want) || f != flags {
						t.Fatalf("block %d, key %d, flags %d, value %d bytes: hit %v, flags %d, got %q",
							bs, klen, flags, n, hit, f, got)
					}
				}
			}
		}
	}
}
