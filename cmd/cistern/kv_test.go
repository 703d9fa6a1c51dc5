package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/tc"
	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kv"
)

// syncBuf is a bytes.Buffer a running command writes while the test reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// inServerNS runs bin in the server namespace of pair. Only the network
// namespace changes: 'ip netns exec' would also remount /sys, and with it
// /sys/fs/bpf, where kv serve pins the maps kv stats reads.
func inServerNS(pair *netenv.Pair, bin string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + pair.ServerNSName(), bin}, args...)...)
}

// kvServe is `cistern kv serve` running in the server namespace of pair.
type kvServe struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuf
}

func startKVServe(t *testing.T, bin string, pair *netenv.Pair, args ...string) *kvServe {
	t.Helper()
	all := append([]string{"kv", "serve", "--iface", pair.ServerIf, "--memcached", pair.ServerIP.String() + ":11211",
		"--pool-mb", "8", "--metrics", "127.0.0.1:9101"}, args...)
	s := &kvServe{cmd: inServerNS(pair, bin, all...), stdout: &syncBuf{}, stderr: &syncBuf{}}
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Loading and verifying Kerby-KV is CPU-bound: 10 s on an idle
	// machine, widened by the load (go test runs packages in parallel).
	limit := testenv.StartTimeout(10 * time.Second)
	for end := time.Now().Add(limit); time.Now().Before(end) && !strings.Contains(s.stdout.String(), "serving;"); {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(s.stdout.String(), "serving;") {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		t.Fatalf("kv serve did not start in %v: %s %s", limit, s.stdout.String(), s.stderr.String())
	}
	return s
}

// stop interrupts the server and returns its exit status.
func (s *kvServe) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGINT)
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("kv serve exit: %v: %s", err, s.stderr.String())
	}
}

// mcUDP is the tests' memcached UDP client, in the client namespace.
type mcUDP struct{ *testenv.MemcachedUDP }

func newMCUDP(t *testing.T, pair *netenv.Pair) *mcUDP {
	t.Helper()
	return &mcUDP{testenv.DialMemcachedUDP(t, pair, 11211)}
}

// once sends text once; ok is false when no reply came within wait.
func (m *mcUDP) once(text string, wait time.Duration) (string, bool) {
	r, err := m.Once(text, wait)
	return r, err == nil
}

// gets sends n GETs of key once each and counts the correct replies.
func (m *mcUDP) gets(key, val string, n int, wait time.Duration) int {
	want := fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\nEND\r\n", key, len(val), val)
	got := 0
	for i := 0; i < n; i++ {
		if r, ok := m.once("get "+key+"\r\n", wait); ok && r == want {
			got++
		}
	}
	return got
}

func kvStatsJSON(t *testing.T, bin, iface string) map[string]uint64 {
	t.Helper()
	out, stderr, code := run(bin, "kv", "stats", "--iface", iface, "--json")
	if code != 0 {
		t.Fatalf("kv stats: exit %d: %s", code, stderr)
	}
	var st struct {
		Counters map[string]uint64 `json:"counters"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("kv stats JSON: %v\n%s", err, out)
	}
	return st.Counters
}

// scrape reads the Prometheus endpoint of a server in the namespace ns.
func scrape(t *testing.T, ns *netenv.Pair) string {
	t.Helper()
	var body []byte
	err := netenv.Do(ns.ServerNS, func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:9101", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		body, err = io.ReadAll(c)
		return err
	})
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return string(body)
}

func metricValue(t *testing.T, page, name string) float64 {
	t.Helper()
	for _, l := range strings.Split(page, "\n") {
		var v float64
		if strings.HasPrefix(l, name+" ") {
			if _, err := fmt.Sscanf(l[len(name)+1:], "%g", &v); err == nil {
				return v
			}
		}
	}
	t.Fatalf("no metric %s in the scrape", name)
	return 0
}

// xdpPass is a minimal XDP_PASS program for the client end of the veth.
func xdpPass(t *testing.T) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestKVServeVethXDPMode runs the real `cistern kv serve` on the server end
// of a veth whose client end runs no XDP program, as a container's would:
//   - --xdp-mode native is refused with exit 2 and a one-line fix;
//   - the default (auto) attaches generic XDP and every kernel hit's reply
//     reaches the client; kv stats and the metrics show driver counters at 0;
//   - --xdp-mode native is accepted while the client end runs an XDP program;
//     when that program goes away, the lost replies show in kv stats and the
//     metrics as driver_xdp_tx_errors, and serve warns on stderr.
func TestKVServeVethXDPMode(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	pair := testenv.NetPair(t, "kvcli")
	testenv.Memcached(t, servers.MemcachedOptions{Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: 11211})
	base := []string{"kv", "serve", "--iface", pair.ServerIf, "--memcached", pair.ServerIP.String() + ":11211", "--pool-mb", "8"}

	for _, extra := range [][]string{{"--xdp-mode", "native"}, {"--xdp-mode", "driver"}, {"--generic", "--xdp-mode", "native"}} {
		c := inServerNS(pair, bin, append(base, extra...)...)
		var o, e bytes.Buffer
		c.Stdout, c.Stderr = &o, &e
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		lines := strings.Split(strings.TrimSpace(e.String()), "\n")
		if code != 2 || !strings.Contains(lines[len(lines)-1], "--xdp-mode") {
			t.Errorf("kv serve %v: exit %d, stderr %q; want 2 and an error naming --xdp-mode", extra, code, e.String())
		}
		if extra[1] == "native" {
			if len(lines) != 1 || !strings.Contains(e.String(), "runs no XDP program") {
				t.Errorf("kv serve --xdp-mode native: want one line naming the fix, got %q", e.String())
			}
			t.Logf("refused: %s", strings.TrimSpace(e.String()))
		}
	}

	mc := newMCUDP(t, pair)
	val := "0123456789abcdef"
	const n = 100

	// Default mode.
	s := startKVServe(t, bin, pair)
	if !strings.Contains(s.stdout.String(), "with generic XDP (auto") {
		t.Errorf("default mode on a veth: %s", s.stdout.String())
	}
	// TCP GETs: the default follows the kernel's self-test, and serve
	// says which and why (kv's TestTCPDefault covers both outcomes).
	tcpOn, tcpWhy := kv.TCPDefault()
	wantMode := map[bool]string{true: "tcp: sockmap;", false: "tcp: off"}[tcpOn]
	if !strings.Contains(s.stderr.String(), "TCP GETs in the kernel: "+tcpWhy) || !strings.Contains(s.stdout.String(), wantMode) {
		t.Errorf("default TCP GETs: want %q on stderr and %q on stdout:\n%s\n%s", tcpWhy, wantMode, s.stderr.String(), s.stdout.String())
	}
	if r, ok := mc.once("set k 0 0 16\r\n"+val+"\r\n", time.Second); !ok || r != "STORED\r\n" {
		t.Fatalf("set: %q %v", r, ok)
	}
	got := mc.gets("k", val, n, time.Second)
	time.Sleep(1200 * time.Millisecond) // one publication of the driver counters
	st := kvStatsJSON(t, bin, pair.ServerIf)
	page := scrape(t, pair)
	t.Logf("auto: %d GETs, %d replies; kv stats hits %d driver_xdp_tx_errors %d; metric %v",
		n, got, st["hits"], st["driver_xdp_tx_errors"], metricValue(t, page, "cistern_kv_driver_xdp_tx_errors_total"))
	if got != n || st["hits"] != n {
		t.Errorf("auto: %d replies and %d hits of %d GETs", got, st["hits"], n)
	}
	if v, ok := st["driver_xdp_tx_errors"]; !ok || v != 0 || metricValue(t, page, "cistern_kv_driver_xdp_tx_errors_total") != 0 {
		t.Errorf("auto: driver_xdp_tx_errors %d (present %v)", v, ok)
	}
	s.stop(t)
	if !strings.Contains(s.stdout.String(), "driver_xdp_tx_errors") {
		t.Errorf("no driver counters printed on exit: %s", s.stdout.String())
	}

	// Native, with an XDP program on the client end, which then goes away.
	var peer link.Link
	prog := xdpPass(t)
	if err := netenv.Do(pair.ClientNS, func() (err error) {
		peer, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: pair.ClientIfindex, Flags: link.XDPDriverMode})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s = startKVServe(t, bin, pair, "--xdp-mode", "native")
	defer func() {
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
	}()
	if !strings.Contains(s.stdout.String(), "with native XDP") {
		t.Errorf("--xdp-mode native: %s", s.stdout.String())
	}
	if r, ok := mc.once("set k 0 0 16\r\n"+val+"\r\n", time.Second); !ok || r != "STORED\r\n" {
		t.Fatalf("set: %q %v", r, ok)
	}
	withPeer := mc.gets("k", val, n, time.Second)
	peer.Close()
	const lost = 40
	without := mc.gets("k", val, lost, 150*time.Millisecond)
	time.Sleep(1200 * time.Millisecond)
	st = kvStatsJSON(t, bin, pair.ServerIf)
	page = scrape(t, pair)
	metric := metricValue(t, page, "cistern_kv_driver_xdp_tx_errors_total")
	t.Logf("native: %d/%d replies with XDP on the peer, %d/%d after it went away; kv stats hits %d driver_xdp_tx_errors %d driver_tx_dropped %d; metric %v",
		withPeer, n, without, lost, st["hits"], st["driver_xdp_tx_errors"], st["driver_tx_dropped"], metric)
	if withPeer != n || without != 0 || st["hits"] != n+lost {
		t.Errorf("native: %d and %d replies, %d hits", withPeer, without, st["hits"])
	}
	if st["driver_xdp_tx_errors"] != lost || metric != lost {
		t.Errorf("native: %d lost replies, driver_xdp_tx_errors %d in kv stats and %v in the metrics", lost, st["driver_xdp_tx_errors"], metric)
	}
	s.stop(t)
	t.Logf("serve's stderr: %s", strings.TrimSpace(s.stderr.String()))
	if !strings.Contains(s.stderr.String(), "dropped") || !strings.Contains(s.stderr.String(), "driver_xdp_tx_errors") ||
		!strings.Contains(s.stderr.String(), "no longer runs an XDP program") {
		t.Errorf("serve did not warn about the dropped replies and the peer: %q", s.stderr.String())
	}
}

// serverFilters names the tc filters on both hooks of the server interface.
func serverFilters(t *testing.T, p *netenv.Pair) (names []string) {
	t.Helper()
	idx := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: p.ServerIfindex}}
	err := netenv.Do(p.ServerNS, func() error {
		for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
			fs, err := netlink.FilterList(idx, parent)
			if err != nil {
				return err
			}
			for _, f := range fs {
				name := f.Type()
				if bf, ok := f.(*netlink.BpfFilter); ok {
					name = bf.Name
				}
				names = append(names, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestKVServeClsBPF runs `cistern kv serve` with kv_ingress and kv_egress
// attached as cls_bpf filters (the variant of kernels before 6.6, forced):
// it says so, big values are answered by kv_ingress, and the filters go
// on SIGINT and when serve fails after attaching; filters a killed serve
// left behind are removed by the next one.
func TestKVServeClsBPF(t *testing.T) {
	testenv.RequireRoot(t)
	t.Setenv(tc.ForceClsBPFEnv, "1") // inherited by serve
	bin := buildCLI(t)
	pair := testenv.NetPair(t, "kvclsbpf")
	testenv.Memcached(t, servers.MemcachedOptions{Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: 11211})
	mc := newMCUDP(t, pair)
	big := strings.Repeat("v", 1000) // too big for the veth's XDP frame: kv_ingress replies
	want := []string{"cistern:kv_ingress", "cistern:kv_egress"}
	serveAndCheck := func() *kvServe {
		t.Helper()
		s := startKVServe(t, bin, pair)
		if !strings.Contains(s.stdout.String(), "tc: cls_bpf (forced by "+tc.ForceClsBPFEnv+"=1)") {
			t.Errorf("serve does not say it attaches cls_bpf filters: %s", s.stdout.String())
		}
		if got := serverFilters(t, pair); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("filters %q, want %q", got, want)
		}
		if r, ok := mc.once("set big 0 0 1000\r\n"+big+"\r\n", time.Second); !ok || r != "STORED\r\n" {
			t.Fatalf("set: %q %v", r, ok)
		}
		if got := mc.gets("big", big, 5, time.Second); got != 5 {
			t.Errorf("%d of 5 GETs of a 1000-byte value answered", got)
		}
		if st := kvStatsJSON(t, bin, pair.ServerIf); st["tc_hits"] != 5 {
			t.Errorf("tc_hits %d, want 5", st["tc_hits"])
		}
		return s
	}

	s := serveAndCheck()
	s.stop(t)
	if got := serverFilters(t, pair); len(got) != 0 {
		t.Fatalf("after SIGINT, filters %q", got)
	}

	// SIGKILL: the filters stay (unlike TCX links); the next serve removes them.
	s = serveAndCheck()
	s.cmd.Process.Kill()
	s.cmd.Wait()
	if got := serverFilters(t, pair); len(got) != 2 {
		t.Fatalf("after SIGKILL, filters %q, want the 2 left behind", got)
	}
	// Its pinned maps stay too, and serve refuses to pin over them.
	os.RemoveAll(filepath.Join(kvPinRoot, pair.ServerIf))
	s = serveAndCheck()
	if !strings.Contains(s.stderr.String(), "removed 2 cls_bpf filter(s) of Kerby-KV") {
		t.Errorf("serve did not report the stale filters it removed: %q", s.stderr.String())
	}
	s.stop(t)
	if got := serverFilters(t, pair); len(got) != 0 {
		t.Fatalf("after SIGINT, filters %q", got)
	}

	// A failure after attaching (the metrics port is taken) detaches too.
	var ln net.Listener
	if err := netenv.Do(pair.ServerNS, func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:9101"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := inServerNS(pair, bin, "kv", "serve", "--iface", pair.ServerIf, "--memcached", pair.ServerIP.String()+":11211",
		"--pool-mb", "8", "--metrics", "127.0.0.1:9101")
	var e bytes.Buffer
	c.Stderr = &e
	// It must fail, not serve: a serve that runs on is killed after the
	// start bound, and fails the test, rather than hang it until the
	// package's timeout.
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	limit := testenv.StartTimeout(10 * time.Second)
	var killed atomic.Bool
	timer := time.AfterFunc(limit, func() { killed.Store(true); c.Process.Kill() })
	err := c.Wait()
	timer.Stop()
	if err == nil || killed.Load() {
		t.Fatalf("serve with its metrics port taken did not fail in %v: %s", limit, e.String())
	}
	t.Logf("failed as expected: %s", strings.TrimSpace(e.String()))
	if got := serverFilters(t, pair); len(got) != 0 {
		t.Fatalf("after a failed serve, filters %q", got)
	}
}
