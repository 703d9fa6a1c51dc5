package tc_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/tc"
	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// counter is a SchedCLS program that counts the packets it sees in an
// array map and returns TC_ACT_UNSPEC (TCX_NEXT).
type counter struct {
	prog *ebpf.Program
	m    *ebpf.Map
}

func newCounter(t *testing.T, name string) *counter {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    name,
		Type:    ebpf.SchedCLS,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.R10, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, -1).WithSymbol("out"), // TC_ACT_UNSPEC
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return &counter{prog: prog, m: m}
}

func (c *counter) n(t *testing.T) uint64 {
	t.Helper()
	var v uint64
	if err := c.m.Lookup(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// traffic sends UDP datagrams client→server (the server's ingress) and
// server→client (the server's egress).
func traffic(t *testing.T, p *netenv.Pair) {
	t.Helper()
	var toServer, toClient *net.UDPConn
	if err := netenv.Do(p.ClientNS, func() (err error) {
		toServer, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.ServerIP, Port: 9})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer toServer.Close()
	inServer(t, p, func() (err error) {
		toClient, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.ClientIP, Port: 9})
		return err
	})
	defer toClient.Close()
	for i := 0; i < 5; i++ {
		toServer.Write([]byte("ping"))
		toClient.Write([]byte("ping"))
	}
}

// waitCount waits (the 6.1 VM runs under TCG, ~10x slower) until c has
// counted a packet.
func waitCount(t *testing.T, c *counter, what string) uint64 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n := c.n(t); n > 0 {
			return n
		}
	}
	t.Fatalf("%s: the program never ran", what)
	return 0
}

// inServer runs fn in the server namespace of p.
func inServer(t *testing.T, p *netenv.Pair, fn func() error) {
	t.Helper()
	if err := netenv.Do(p.ServerNS, fn); err != nil {
		t.Fatal(err)
	}
}

// bpfFilters lists the bpf filters on the server's hooks.
func bpfFilters(t *testing.T, p *netenv.Pair) (ingress, egress []*netlink.BpfFilter) {
	t.Helper()
	idx := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.ServerIfindex}}
	inServer(t, p, func() error {
		for _, hook := range []struct {
			parent uint32
			out    *[]*netlink.BpfFilter
		}{{netlink.HANDLE_MIN_INGRESS, &ingress}, {netlink.HANDLE_MIN_EGRESS, &egress}} {
			fs, err := netlink.FilterList(idx, hook.parent)
			if err != nil {
				return err
			}
			for _, f := range fs {
				bf, ok := f.(*netlink.BpfFilter)
				if !ok {
					return fmt.Errorf("unexpected %s filter %+v", f.Type(), f.Attrs())
				}
				*hook.out = append(*hook.out, bf)
			}
		}
		return nil
	})
	return ingress, egress
}

// hasClsact: the server interface has a clsact qdisc.
func hasClsact(t *testing.T, p *netenv.Pair) bool {
	t.Helper()
	found := false
	inServer(t, p, func() error {
		qs, err := netlink.QdiscList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.ServerIfindex}})
		for _, q := range qs {
			found = found || q.Type() == "clsact"
		}
		return err
	})
	return found
}

func tcxCount(t *testing.T, p *netenv.Pair, at ebpf.AttachType) int {
	t.Helper()
	var n int
	inServer(t, p, func() error {
		r, err := link.QueryPrograms(link.QueryOptions{Target: p.ServerIfindex, Attach: at})
		if err != nil {
			return err
		}
		n = len(r.Programs)
		return nil
	})
	return n
}

func TestTCXProbe(t *testing.T) {
	testenv.RequireRoot(t)
	err := kernel.TCX()
	t.Logf("kernel %s: TCX() = %v; TCMode %q", kernel.Release(), err, tc.Mode())
	if kernel.AtLeast(6, 6) && err != nil {
		t.Fatalf("TCX on %s: %v", kernel.Release(), err)
	}
	if !kernel.AtLeast(6, 6) && !errors.Is(err, kernel.ErrMissing) {
		t.Fatalf("TCX on %s: %v, want ErrMissing", kernel.Release(), err)
	}
	want := "tcx"
	if err != nil {
		want = "cls_bpf (TCX needs Linux 6.6)"
	}
	if got := tc.Mode(); got != want {
		t.Fatalf("TCMode %q, want %q", got, want)
	}
	t.Setenv(tc.ForceClsBPFEnv, "1")
	if got := tc.Mode(); got != "cls_bpf (forced by CISTERN_FORCE_CLS_BPF=1)" {
		t.Fatalf("forced TCMode %q", got)
	}
}

// TestAttachTC attaches counting programs to both hooks of a veth in each
// variant, checks that packets run them, and that Close removes them (and
// the clsact qdisc AttachTC added), from outside the namespace.
func TestAttachTC(t *testing.T) {
	t.Run("tcx", func(t *testing.T) {
		testenv.RequireRoot(t)
		if err := kernel.TCX(); err != nil {
			t.Skipf("skipped: %v", err) // not a missing tool: a kernel without TCX (before 6.6)
		}
		testAttachTC(t, "ktcx", tc.VariantTCX)
	})
	t.Run("cls_bpf", func(t *testing.T) {
		testenv.RequireRoot(t)
		if kernel.TCX() == nil {
			t.Setenv(tc.ForceClsBPFEnv, "1") // else it is the kernel's own choice
		}
		testAttachTC(t, "kclsbpf", tc.VariantClsBPF)
	})
}

func testAttachTC(t *testing.T, name string, want tc.Variant) {
	p := testenv.NetPair(t, name)
	if v, why := tc.Choice(); v != want {
		t.Fatalf("TCChoice %s (%s), want %s", v, why, want)
	}
	in, eg := newCounter(t, "tc_count_in"), newCounter(t, "tc_count_eg")
	var lin, leg *tc.Link
	inServer(t, p, func() (err error) {
		if lin, err = tc.Attach(in.prog, p.ServerIfindex, tc.Ingress); err != nil {
			return err
		}
		leg, err = tc.Attach(eg.prog, p.ServerIfindex, tc.Egress)
		return err
	})
	if lin.Variant != want || leg.Variant != want {
		t.Fatalf("variants %s/%s, want %s", lin.Variant, leg.Variant, want)
	}
	switch want {
	case tc.VariantTCX:
		if a, b := tcxCount(t, p, ebpf.AttachTCXIngress), tcxCount(t, p, ebpf.AttachTCXEgress); a != 1 || b != 1 {
			t.Fatalf("TCX programs attached: ingress %d egress %d", a, b)
		}
	case tc.VariantClsBPF:
		fi, fe := bpfFilters(t, p)
		if len(fi) != 1 || len(fe) != 1 {
			t.Fatalf("cls_bpf filters: ingress %d egress %d, want 1 each", len(fi), len(fe))
		}
		for _, f := range []*netlink.BpfFilter{fi[0], fe[0]} {
			if !f.DirectAction || !strings.HasPrefix(f.Name, "cistern:tc_count_") {
				t.Fatalf("filter %+v: want direct-action and named cistern:tc_count_*", f)
			}
		}
		if !hasClsact(t, p) {
			t.Fatal("no clsact qdisc")
		}
	}

	traffic(t, p)
	ni, ne := waitCount(t, in, "ingress"), waitCount(t, eg, "egress")
	t.Logf("%s: ingress saw %d packets, egress %d", want, ni, ne)

	// Close from this goroutine, outside the namespace.
	if err := lin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := leg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := leg.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	switch want {
	case tc.VariantTCX:
		if a, b := tcxCount(t, p, ebpf.AttachTCXIngress), tcxCount(t, p, ebpf.AttachTCXEgress); a != 0 || b != 0 {
			t.Fatalf("after Close, TCX programs attached: ingress %d egress %d", a, b)
		}
	case tc.VariantClsBPF:
		if fi, fe := bpfFilters(t, p); len(fi) != 0 || len(fe) != 0 {
			t.Fatalf("after Close, cls_bpf filters: ingress %v egress %v", fi, fe)
		}
		if hasClsact(t, p) {
			t.Fatal("after Close, the clsact qdisc AttachTC added is still there")
		}
	}
	ni, ne = in.n(t), eg.n(t)
	traffic(t, p)
	time.Sleep(200 * time.Millisecond)
	if in.n(t) != ni || eg.n(t) != ne {
		t.Fatalf("programs still run after Close: ingress %d→%d egress %d→%d", ni, in.n(t), ne, eg.n(t))
	}
}

// TestClsBPFSharing: a clsact qdisc that was there before stays; two
// filters on one hook get their own priorities and Close removes only its
// own; a filter of the same name left by a dead process is replaced.
func TestClsBPFSharing(t *testing.T) {
	testenv.RequireRoot(t)
	t.Setenv(tc.ForceClsBPFEnv, "1")
	p := testenv.NetPair(t, "kclsshr")
	a, b := newCounter(t, "tc_share_a"), newCounter(t, "tc_share_b")

	// Two on one hook: the qdisc goes only with the last.
	var la, lb *tc.Link
	inServer(t, p, func() (err error) {
		if la, err = tc.Attach(a.prog, p.ServerIfindex, tc.Ingress); err != nil {
			return err
		}
		lb, err = tc.Attach(b.prog, p.ServerIfindex, tc.Ingress)
		return err
	})
	fi, _ := bpfFilters(t, p)
	if len(fi) != 2 || fi[0].Priority == fi[1].Priority {
		t.Fatalf("two ingress filters, want distinct priorities: %+v", fi)
	}
	traffic(t, p)
	waitCount(t, b, "second filter") // the first returns TC_ACT_UNSPEC: the next runs
	if err := la.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ = bpfFilters(t, p); len(fi) != 1 || fi[0].Name != "cistern:tc_share_b" {
		t.Fatalf("after closing a: %+v", fi)
	}
	if !hasClsact(t, p) {
		t.Fatal("the qdisc went while b still uses it")
	}
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	if hasClsact(t, p) {
		t.Fatal("the qdisc stayed after the last filter went")
	}

	// A filter named like ours that no live TCLink owns (a killed process
	// left it) is replaced; a clsact qdisc that was there before stays.
	// AttachTC's handle is the program's ID: the stale one gets another.
	info, err := a.prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	staleHandle := uint32(id) + 1000
	inServer(t, p, func() error {
		if err := netlink.QdiscAdd(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: p.ServerIfindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}); err != nil {
			return err
		}
		return netlink.FilterAdd(&netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: p.ServerIfindex, Parent: netlink.HANDLE_MIN_EGRESS,
				Handle: staleHandle, Priority: 1, Protocol: unix.ETH_P_ALL},
			Fd: a.prog.FD(), Name: "cistern:tc_share_a", DirectAction: true,
		})
	})
	var ls *tc.Link
	inServer(t, p, func() (err error) {
		ls, err = tc.Attach(a.prog, p.ServerIfindex, tc.Egress)
		return err
	})
	if ls.Stale != 1 {
		t.Fatalf("Stale %d, want 1", ls.Stale)
	}
	_, fe := bpfFilters(t, p)
	if len(fe) != 1 || fe[0].Handle == staleHandle {
		t.Fatalf("egress filters %+v: want only the new one", fe)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	if _, fe = bpfFilters(t, p); len(fe) != 0 {
		t.Fatalf("after Close: %+v", fe)
	}
	if !hasClsact(t, p) {
		t.Fatal("Close deleted a clsact qdisc it had not added")
	}
}

// TestClsBPFCloseAfterInterfaceGone: the filter went with its interface;
// Close says nothing.
func TestClsBPFCloseAfterInterfaceGone(t *testing.T) {
	testenv.RequireRoot(t)
	t.Setenv(tc.ForceClsBPFEnv, "1")
	p := testenv.NetPair(t, "kclsgone")
	c := newCounter(t, "tc_gone")
	var l *tc.Link
	inServer(t, p, func() (err error) {
		if l, err = tc.Attach(c.prog, p.ServerIfindex, tc.Egress); err != nil {
			return err
		}
		return netlink.LinkDel(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.ServerIfindex}})
	})
	if err := l.Close(); err != nil {
		t.Fatalf("Close after the interface went: %v", err)
	}
}
