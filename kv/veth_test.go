package kv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// getsOnce sends each GET once (no resend) and counts the replies that
// came back intact; hits is how many of them kv_stats counted as hits.
func getsOnce(t *testing.T, e *kvEnv, u *udpClient, keys []string, vals map[string]string, n int, wait time.Duration) (replies, hits int) {
	t.Helper()
	h0 := e.counter(t, "hits")
	for i := 0; i < n; i++ {
		k := keys[i%len(keys)]
		r, err := u.Once("get "+k+"\r\n", wait)
		if err != nil {
			continue
		}
		if want := fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\nEND\r\n", k, len(vals[k]), vals[k]); r != want {
			t.Fatalf("get %s: reply %.60q…, want %.60q…", k, r, want)
		}
		replies++
	}
	return replies, int(e.counter(t, "hits") - h0)
}

// setKeys stores a 16-byte value (its reply is built in XDP and sent with
// XDP_TX) and a 1000-byte one (answered by the TC path) per key pair.
func setKeys(t *testing.T, u *udpClient) ([]string, map[string]string) {
	t.Helper()
	vals := map[string]string{}
	var keys []string
	for i := 0; i < 4; i++ {
		for _, size := range []int{16, 1000} {
			k := fmt.Sprintf("k%d-%d", i, size)
			v := strings.Repeat(string(rune('a'+i)), size)
			r, err := u.Do(fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", k, size, v))
			mustReply(t, r, err, "STORED\r\n")
			keys, vals[k] = append(keys, k), v
		}
	}
	return keys, vals
}

func xdpKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasSuffix(k, "-16") {
			out = append(out, k)
		}
	}
	return out
}

// TestVethPeerWithoutXDP is Kerby-KV on a veth whose other end runs no XDP
// program (a container's veth), in the default mode: every GET is a kernel
// hit and every hit's reply reaches the client in the peer namespace. With
// native XDP (the old default on a veth) the XDP_TX replies were dropped by
// the veth driver while kv_stats counted the hits.
func TestVethPeerWithoutXDP(t *testing.T) {
	e := newKVEnv(t, "kvveth", Config{})
	li := e.srv.Link
	if li.Kind != "veth" || li.Peer == nil || li.Peer.Err != nil {
		t.Fatalf("link %+v: want a veth with a readable peer", li)
	}
	if li.Peer.NetnsID < 0 || li.Peer.Ifindex != e.pair.ClientIfindex || li.Peer.Delivers() {
		t.Fatalf("peer %+v: want ifindex %d in another namespace, without XDP", *li.Peer, e.pair.ClientIfindex)
	}
	if e.srv.XDPMode != "generic" {
		t.Fatalf("auto chose %s XDP on a veth whose peer has no XDP program", e.srv.XDPMode)
	}
	u := e.udp(t)
	keys, vals := setKeys(t, u)
	const n = 200
	replies, hits := getsOnce(t, e, u, keys, vals, n, time.Second)
	dc := must(e.srv.DriverCounters())
	t.Logf("%s XDP: %d GETs, %d replies, %d kernel hits (%d via TC), driver %v", e.srv.XDPMode, n, replies, hits, e.counter(t, "tc_hits"), dc)
	if hits != n {
		t.Fatalf("%d of %d GETs were kernel hits", hits, n)
	}
	if replies != n {
		t.Fatalf("%d kernel hits, %d replies reached the client", hits, replies)
	}
	if v, ok := dc["driver_xdp_tx_errors"]; !ok || v != 0 {
		t.Fatalf("driver_xdp_tx_errors %d (reported: %v)", v, ok)
	}
}

// TestVethNativeWithoutPeerXDP forces native XDP on a veth whose peer runs
// no XDP program (what `cistern kv serve --xdp-mode native` refuses): the
// XDP_TX replies are lost, and every one shows in driver_xdp_tx_errors, in
// Stats and in the pinned counters `cistern kv stats` reads. Once the peer
// runs an XDP program, the peer check passes and the replies arrive.
func TestVethNativeWithoutPeerXDP(t *testing.T) {
	e := newKVEnvWith(t, "kvvnat", Config{}, XDPNative, false)
	if e.srv.XDPMode != "native" {
		t.Fatalf("mode %s", e.srv.XDPMode)
	}
	if p := e.srv.Link.Peer; p == nil || p.Err != nil || p.Delivers() {
		t.Fatalf("peer %+v: want readable, without XDP", p)
	}
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("cistern-test-kvvnat-%d", os.Getpid()))
	if err := e.srv.Pin(dir); err != nil {
		t.Fatal(err)
	}
	u := e.udp(t)
	keys, vals := setKeys(t, u)
	xk := xdpKeys(keys)
	const n = 50
	replies, hits := getsOnce(t, e, u, xk, vals, n, 150*time.Millisecond)
	st := must(e.srv.Stats())
	if _, err := e.srv.PublishDriverCounters(); err != nil {
		t.Fatal(err)
	}
	pst := must(PinnedStats(dir))
	t.Logf("native XDP, no program on the peer: %d GETs, %d replies, %d hits; driver_xdp_tx_errors %d (pinned %d), driver_tx_dropped %d",
		n, replies, hits, st.Counters["driver_xdp_tx_errors"], pst.Counters["driver_xdp_tx_errors"], st.Counters["driver_tx_dropped"])
	if hits != n || replies != 0 {
		t.Fatalf("%d hits and %d replies: expected the veth to drop all %d XDP_TX replies", hits, replies, n)
	}
	if got := st.Counters["driver_xdp_tx_errors"]; got != n {
		t.Fatalf("driver_xdp_tx_errors %d, want %d (one per lost reply)", got, n)
	}
	if got := pst.Counters["driver_xdp_tx_errors"]; got != n {
		t.Fatalf("pinned driver_xdp_tx_errors %d, want %d", got, n)
	}
	if m := must(e.srv.CountersAndDriver()); m["driver_xdp_tx_errors"] != n || m["hits"] == 0 {
		t.Fatalf("metrics counters %v", m)
	}

	// A value that does not fit the XDP frame goes to the TC path, which
	// answers with bpf_redirect and needs nothing of the peer. Whether it
	// fits depends on the kernel's veth: 6.1 gives a native XDP frame a
	// page of tailroom, so the 1000-byte reply is built in XDP and lost
	// like the small ones. Either way it is delivered or counted, never
	// lost silently.
	before := must(e.srv.Stats()).Counters
	r, err := u.Once("get k0-1000\r\n", 500*time.Millisecond*testenv.TimeScale())
	after := must(e.srv.Stats()).Counters
	switch {
	case err == nil:
		mustReply(t, r, err, "VALUE k0-1000 0 1000\r\n"+vals["k0-1000"]+"\r\nEND\r\n")
		if after["tc_hits"] != before["tc_hits"]+1 {
			t.Fatalf("1000-byte reply delivered but tc_hits %d -> %d", before["tc_hits"], after["tc_hits"])
		}
		t.Logf("1000-byte value: answered by the TC path")
	case after["hits"] == before["hits"]+1 && after["tc_hits"] == before["tc_hits"] &&
		after["driver_xdp_tx_errors"] == before["driver_xdp_tx_errors"]+1:
		t.Logf("1000-byte value: built in the XDP frame and dropped by the peer, counted in driver_xdp_tx_errors")
	default:
		t.Fatalf("1000-byte GET: no reply (%v) and not counted: before %v after %v", err, before, after)
	}

	var peer link.Link
	if err := netenv.Do(e.pair.ClientNS, func() (err error) { peer, err = e.srv.AttachPeerPass(e.pair.ClientIfindex); return err }); err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	var li LinkInfo
	if err := netenv.Do(e.pair.ServerNS, func() (err error) { li, err = InspectLink(e.pair.ServerIfindex); return err }); err != nil {
		t.Fatal(err)
	}
	if !li.Peer.Delivers() || li.Peer.XDPAttached != xdpAttachedDrv {
		t.Fatalf("peer with an XDP program: %+v", *li.Peer)
	}
	replies, hits = getsOnce(t, e, u, xk, vals, n, time.Second)
	t.Logf("with XDP_PASS on the peer: %d GETs, %d replies, %d hits; driver_xdp_tx_errors %d", n, replies, hits, must(e.srv.DriverCounters())["driver_xdp_tx_errors"])
	if hits != n || replies != n {
		t.Fatalf("peer with XDP: %d hits, %d replies of %d", hits, replies, n)
	}
	r, err = u.Once("get k0-1000\r\n", 500*time.Millisecond*testenv.TimeScale())
	mustReply(t, r, err, "VALUE k0-1000 0 1000\r\n"+vals["k0-1000"]+"\r\nEND\r\n")
}

func TestParseXDPMode(t *testing.T) {
	for in, want := range map[string]XDPMode{"": XDPAuto, "auto": XDPAuto, "native": XDPNative, "generic": XDPGeneric} {
		if got, err := ParseXDPMode(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseXDPMode("driver"); err == nil || !strings.Contains(err.Error(), "auto, native, generic") {
		t.Errorf("driver: %v", err)
	}
}

func TestSumXDPTxErrors(t *testing.T) {
	veth := map[string]uint64{"rx_queue_0_xdp_tx_errors": 3, "rx_queue_1_xdp_tx_errors": 4, "rx_queue_0_xdp_tx": 9, "tx_queue_0_xdp_xmit_errors": 5}
	if v, ok := sumXDPTxErrors(veth); !ok || v != 7 {
		t.Errorf("veth: %d %v", v, ok)
	}
	withTotal := map[string]uint64{"rx_xdp_tx_err": 7, "rx0_xdp_tx_err": 3, "rx1_xdp_tx_err": 4}
	if v, ok := sumXDPTxErrors(withTotal); !ok || v != 7 {
		t.Errorf("total: %d %v", v, ok)
	}
	if _, ok := sumXDPTxErrors(map[string]uint64{"rx_packets": 1}); ok {
		t.Error("no such statistic: want absent")
	}
}

// TestInspectLink reads a veth whose peer is in the same namespace (with no
// XDP program, generic XDP, then native XDP on the peer: only the last
// delivers native XDP_TX), and a device that is no veth (loopback); the
// cross-namespace peer is covered by the tests above.
func TestInspectLink(t *testing.T) {
	pair := testenv.NetPair(t, "kvinsp")
	err := netenv.Do(pair.ServerNS, func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kvinspa"}, PeerName: "kvinspb"}); err != nil {
			return err
		}
		a, err := netlink.LinkByName("kvinspa")
		if err != nil {
			return err
		}
		b, err := netlink.LinkByName("kvinspb")
		if err != nil {
			return err
		}
		li, err := InspectLink(a.Attrs().Index)
		if err != nil {
			return err
		}
		if li.Name != "kvinspa" || li.Kind != "veth" || li.Peer == nil {
			return fmt.Errorf("veth: %+v", li)
		}
		if p := li.Peer; p.Err != nil || p.NetnsID != -1 || p.Ifindex != b.Attrs().Index || p.Delivers() {
			return fmt.Errorf("same-namespace peer: %+v", *p)
		}
		// Generic XDP on the peer does not make native XDP_TX deliver;
		// driver mode does.
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}})
		if err != nil {
			return err
		}
		defer prog.Close()
		for _, m := range []struct {
			flags    link.XDPAttachFlags
			attached uint8
			delivers bool
		}{{link.XDPGenericMode, 2, false}, {link.XDPDriverMode, xdpAttachedDrv, true}} {
			l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: b.Attrs().Index, Flags: m.flags})
			if err != nil {
				return err
			}
			li, err = InspectLink(a.Attrs().Index)
			l.Close()
			if err != nil {
				return err
			}
			if p := li.Peer; p.XDPAttached != m.attached || p.Delivers() != m.delivers {
				return fmt.Errorf("peer with XDP flags %v: %+v", m.flags, *p)
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if li, err = InspectLink(lo.Attrs().Index); err != nil || li.Kind != "" || li.Peer != nil {
			return fmt.Errorf("lo: %+v %v", li, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
