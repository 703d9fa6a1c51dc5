package kv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// readReply reads one reply to a get: VALUE blocks until END.
func readReply(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return b.String(), err
		}
		b.WriteString(line)
		if line == "END\r\n" || !strings.HasPrefix(line, "VALUE ") {
			return b.String(), nil
		}
		var key string
		var flags, n int
		if _, err := fmt.Sscanf(line, "VALUE %s %d %d", &key, &flags, &n); err != nil {
			return b.String(), fmt.Errorf("bad VALUE line %q: %v", line, err)
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(r, data); err != nil {
			return b.String(), err
		}
		b.Write(data)
	}
}

func (t *tcpClient) get(text string) (string, error) {
	t.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := t.c.Write([]byte(text)); err != nil {
		return "", err
	}
	return readReply(t.r)
}

// TestTCPGetServedInKernel: a GET on memcached's TCP connection misses,
// memcached's reply fills the pool, and the next GET is answered in the
// kernel with the same bytes; a TCP write invalidates it before memcached
// answers.
func TestTCPGetServedInKernel(t *testing.T) {
	e := newKVEnv(t, "kvtcp", Config{TCP: true})
	if e.srv.TCPMode != "sockmap" {
		t.Fatalf("TCP path: %s", e.srv.TCPMode)
	}
	c := e.tcp(t)
	mustReply(t, must(c.cmd("set k 5 0 5\r\nhello\r\n")), nil, "STORED\r\n")
	mustReply(t, must(c.cmd("set k2 0 0 3\r\nabc\r\n")), nil, "STORED\r\n")
	time.Sleep(60 * time.Millisecond) // the fill quarantine after a write
	want := "VALUE k 5 5\r\nhello\r\nEND\r\n"
	mustReply(t, must(c.get("get k\r\n")), nil, want)
	mustReply(t, must(c.get("get k2\r\n")), nil, "VALUE k2 0 3\r\nabc\r\nEND\r\n")
	hits0 := e.counter(t, "tcp_hits")
	for i := 0; i < 5; i++ {
		mustReply(t, must(c.get("get k\r\n")), nil, want)
	}
	mustReply(t, must(c.get("get k k2\r\n")), nil, want[:len(want)-5]+"VALUE k2 0 3\r\nabc\r\nEND\r\n")
	c2, _ := e.srv.Counters()
	t.Logf("counters: %v", c2)
	if got := e.counter(t, "tcp_hits") - hits0; got < 6 {
		t.Fatalf("tcp_hits went up by %d, want 6", got)
	}
	mustReply(t, must(c.cmd("set k 0 0 2\r\nhi\r\n")), nil, "STORED\r\n")
	mustReply(t, must(c.get("get k\r\n")), nil, "VALUE k 0 2\r\nhi\r\nEND\r\n")
}

// dialer connects from the client's network namespace.
func (e *kvEnv) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = netenv.Do(e.pair.ClientNS, func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// TestTCPGomemcache: gomemcache, an ordinary client library (it reads with
// gets, so the CAS path is what serves it), against memcached with Kerby-KV
// in front: sets, gets, multi-gets, deletes, CAS, and goroutines sharing
// its connections; every answer is checked and most warm gets are answered
// in the kernel.
func TestTCPGomemcache(t *testing.T) {
	e := newKVEnv(t, "kvgomc", Config{TCP: true})
	mc := memcache.New(e.mc.Addr())
	mc.DialContext = e.dialer()
	mc.Timeout = 2 * time.Second * testenv.TimeScale() // a TCG guest beside others took longer than 2 s once (sid, session 23)
	mc.MaxIdleConns = 8
	val := func(k string, v int) []byte {
		return []byte(fmt.Sprintf("%s=%d:%s", k, v, strings.Repeat("x", (v*37)%700)))
	}
	keys := make([]string, 64)
	ver := map[string]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("gm:%d", i)
		ver[keys[i]] = 1
		if err := mc.Set(&memcache.Item{Key: keys[i], Value: val(keys[i], 1), Flags: uint32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(60 * time.Millisecond)
	check := func(it *memcache.Item, k string) {
		t.Helper()
		if want := val(k, ver[k]); !bytes.Equal(it.Value, want) {
			t.Fatalf("%s: got %q, want %q", k, it.Value, want)
		}
	}
	for round := 0; round < 4; round++ {
		for i, k := range keys {
			it, err := mc.Get(k)
			if err != nil {
				t.Fatalf("round %d get %s: %v", round, k, err)
			}
			check(it, k)
			if it.Flags != uint32(i) {
				t.Fatalf("%s: flags %d, want %d", k, it.Flags, i)
			}
		}
		m, err := mc.GetMulti(keys[:10])
		if err != nil || len(m) != 10 {
			t.Fatalf("multi-get: %d items, %v", len(m), err)
		}
		for k, it := range m {
			check(it, k)
		}
	}
	hits := e.counter(t, "tcp_hits")
	if hits < uint64(len(keys)) {
		t.Fatalf("tcp_hits %d: warm gets were not answered in the kernel", hits)
	}
	// CAS from a kernel-answered gets is memcached's: a CompareAndSwap with
	// it succeeds, and a second one with the same item fails.
	it, err := mc.Get(keys[3])
	if err != nil {
		t.Fatal(err)
	}
	it.Value = val(keys[3], 2)
	if err := mc.CompareAndSwap(it); err != nil {
		t.Fatalf("cas with the kernel's CAS value: %v", err)
	}
	ver[keys[3]] = 2
	if err := mc.CompareAndSwap(it); err != memcache.ErrCASConflict {
		t.Fatalf("second cas with the same CAS: %v, want a conflict", err)
	}
	check(must(mc.Get(keys[3])), keys[3])
	// deletes and overwrites are seen at once
	if err := mc.Delete(keys[5]); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Get(keys[5]); err != memcache.ErrCacheMiss {
		t.Fatalf("get after delete: %v", err)
	}
	// goroutines sharing the client's connections, each with its keys
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				k := keys[8+g*7+i%7]
				if i%10 == 0 {
					if err := mc.Set(&memcache.Item{Key: k, Value: []byte(fmt.Sprintf("%s/%d", k, i))}); err != nil {
						errs <- err
						return
					}
					continue
				}
				it, err := mc.Get(k)
				if err != nil {
					errs <- fmt.Errorf("get %s: %w", k, err)
					return
				}
				if !bytes.HasPrefix(it.Value, []byte(k)) {
					errs <- fmt.Errorf("get %s: %q", k, it.Value)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c, _ := e.srv.Counters()
	t.Logf("tcp_hits %d tcp_misses %d tcp_pass_order %d tcp_fills %d tcp_blind %d pass_cas %d", c["tcp_hits"], c["tcp_misses"], c["tcp_pass_order"], c["tcp_fills"], c["tcp_blind"], c["pass_cas"])
	if c["tcp_blind"] != 0 || c["tcp_stage_lost"] != 0 {
		t.Fatalf("tcp_blind %d tcp_stage_lost %d", c["tcp_blind"], c["tcp_stage_lost"])
	}
}

// TestTCPPipelineOrder: one connection pipelines 1,000 requests mixing
// hits, misses, multi-gets, gets, sets and deletes, in bursts, sometimes
// after every earlier reply arrived (so that whole bursts of hits are
// answered in the kernel) and sometimes not. Every reply arrives in request
// order with the right value.
func TestTCPPipelineOrder(t *testing.T) {
	e := newKVEnv(t, "kvorder", Config{TCP: true})
	c := e.tcp(t)
	model := map[string]string{}
	flags := map[string]int{}
	hot := make([]string, 40)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot:%d", i)
		v := fmt.Sprintf("v0-%d-%s", i, strings.Repeat("h", i*13))
		mustReply(t, must(c.cmd(fmt.Sprintf("set %s %d 0 %d\r\n%s\r\n", hot[i], i, len(v), v))), nil, "STORED\r\n")
		model[hot[i]], flags[hot[i]] = v, i
	}
	time.Sleep(60 * time.Millisecond)
	for _, k := range hot { // fills
		must(c.get("get " + k + "\r\n"))
	}
	hits0 := e.counter(t, "tcp_hits")
	rng := rand.New(rand.NewPCG(1, 2))
	value := func(k string, keys ...string) string {
		var b strings.Builder
		for _, k := range keys {
			if v, ok := model[k]; ok {
				fmt.Fprintf(&b, "VALUE %s %d %d\r\n%s\r\n", k, flags[k], len(v), v)
			}
		}
		return b.String() + "END\r\n"
	}
	type req struct{ text, want string }
	var reqs []req
	var bursts []int // request index where a burst starts after every earlier reply arrived
	for len(reqs) < 1000 {
		if rng.IntN(8) == 0 {
			// a burst of gets of hot keys after a pause: served in the kernel
			bursts = append(bursts, len(reqs))
			for n := 1 + rng.IntN(6); n > 0; n-- {
				k := hot[rng.IntN(len(hot))]
				reqs = append(reqs, req{"get " + k + "\r\n", value(k, k)})
			}
			bursts = append(bursts, len(reqs))
			continue
		}
		k := hot[rng.IntN(len(hot))]
		w := fmt.Sprintf("w:%d", rng.IntN(20)) // keys written often
		if rng.IntN(8) == 0 {
			w = k // and now and then a hot one
		}
		switch r := rng.IntN(100); {
		case r < 45:
			reqs = append(reqs, req{"get " + k + "\r\n", value(k, k)})
		case r < 52:
			m := fmt.Sprintf("cold:%d", rng.IntN(100))
			reqs = append(reqs, req{"get " + m + "\r\n", value(m, m)})
		case r < 58:
			k2, k3 := hot[rng.IntN(len(hot))], fmt.Sprintf("cold:%d", rng.IntN(100))
			reqs = append(reqs, req{"get " + k + " " + k3 + " " + k2 + "\r\n", value("", k, k3, k2)})
		case r < 64:
			reqs = append(reqs, req{"get " + w + "\r\n", value(w, w)})
		case r < 72:
			reqs = append(reqs, req{"gets " + k + "\r\n", value(k, k)})
		case r < 88:
			v := fmt.Sprintf("v%d-%s", len(reqs), strings.Repeat("s", rng.IntN(300)))
			f := rng.IntN(1000)
			reqs = append(reqs, req{fmt.Sprintf("set %s %d 0 %d\r\n%s\r\n", w, f, len(v), v), "STORED\r\n"})
			model[w], flags[w] = v, f
		case r < 94:
			want := "NOT_FOUND\r\n"
			if _, ok := model[w]; ok {
				want = "DELETED\r\n"
			}
			reqs = append(reqs, req{"delete " + w + "\r\n", want})
			delete(model, w)
		default:
			reqs = append(reqs, req{"set " + w + " 0 0 1 noreply\r\nn\r\n", ""})
			model[w], flags[w] = "n", 0
		}
	}
	// the reader checks replies in order; gets' CAS values are dropped
	done := make(chan error, 1)
	got := make(chan int, len(reqs))
	go func() {
		for i, r := range reqs {
			if r.want == "" {
				got <- i
				continue
			}
			c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var s string
			var err error
			if strings.HasPrefix(r.want, "VALUE") || r.want == "END\r\n" {
				s, err = readReply(c.r)
				if strings.HasPrefix(r.text, "gets ") {
					s = dropCAS(s)
				}
			} else {
				s, err = c.r.ReadString('\n')
			}
			if err != nil || s != r.want {
				cs, _ := e.srv.Counters()
				done <- fmt.Errorf("request %d %q: reply %q (%v), want %q; tcp_hits %d tcp_stage_lost %d tcp_blind %d", i, r.text, s, err, r.want, cs["tcp_hits"], cs["tcp_stage_lost"], cs["tcp_blind"])
				return
			}
			got <- i
		}
		done <- nil
	}()
	last := -1
	wait := func(upto int) { // until the reply to request upto-1 arrived
		for last < upto-1 {
			select {
			case last = <-got:
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				done <- nil // the reader has read every reply
				return
			}
		}
	}
	for i, bi := 0, 0; i < len(reqs); {
		n := 1 + rng.IntN(25)
		for bi < len(bursts) && bursts[bi] <= i {
			if bursts[bi] == i {
				wait(i)
				if rng.IntN(4) == 0 {
					time.Sleep(60 * time.Millisecond) // past the fill quarantine
				}
			}
			bi++
		}
		if bi < len(bursts) && i+n > bursts[bi] {
			n = bursts[bi] - i // a burst goes alone
		}
		var b strings.Builder
		for j := i; j < i+n && j < len(reqs); j++ {
			b.WriteString(reqs[j].text)
		}
		c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		data := []byte(b.String())
		if rng.IntN(5) == 0 && len(data) > 2 {
			// a request split between two segments
			cut := 1 + rng.IntN(len(data)-1)
			if _, err := c.c.Write(data[:cut]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
			data = data[cut:]
		}
		if _, err := c.c.Write(data); err != nil {
			t.Fatal(err)
		}
		i += n
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cs, _ := e.srv.Counters()
	t.Logf("1,000 requests: tcp_hits %d tcp_misses %d tcp_pass_order %d tcp_pass_split %d tcp_fills %d tcp_replies %d tcp_blind %d",
		cs["tcp_hits"]-hits0, cs["tcp_misses"], cs["tcp_pass_order"], cs["tcp_pass_split"], cs["tcp_fills"], cs["tcp_replies"], cs["tcp_blind"])
	if cs["tcp_hits"] == hits0 {
		t.Fatal("no request was answered in the kernel: the order test tested nothing of it")
	}
	if cs["tcp_blind"] != 0 {
		t.Fatalf("tcp_blind %d: the stream was lost", cs["tcp_blind"])
	}
	if cs["tcp_pass_split"] == 0 {
		t.Fatal("no request was split between segments: the test did not test that")
	}
}

// dropCAS removes the CAS token of a gets reply's VALUE lines.
func dropCAS(s string) string {
	var b strings.Builder
	r := bufio.NewReader(strings.NewReader(s))
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return b.String() + line
		}
		if f := strings.Fields(line); len(f) == 5 && f[0] == "VALUE" {
			var n int
			fmt.Sscanf(f[3], "%d", &n)
			b.WriteString(strings.Join(f[:4], " ") + "\r\n")
			data := make([]byte, n+2)
			io.ReadFull(r, data)
			b.Write(data)
			continue
		}
		b.WriteString(line)
	}
}

// TestLoadWithoutTCP: where a kernel's verifier refuses the TCP programs,
// Kerby-KV loads without them and still serves UDP; the TCP programs are
// the socket ones (sockops, sk_skb, sk_msg), whatever their names.
func TestLoadWithoutTCP(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := Config{PoolMB: 8}
	cfg.defaults()
	spec, err := loadKern()
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.PoolConfig().Apply(spec); err != nil {
		t.Fatal(err)
	}
	var tcp []string
	for name, p := range spec.Programs {
		if tcpProgram(p) {
			tcp = append(tcp, name)
		}
	}
	slices.Sort(tcp)
	if want := []string{"kv_sockops", "kv_tcp_msg", "kv_tcp_verdict"}; !slices.Equal(tcp, want) {
		t.Errorf("TCP programs %v, want %v (tcp.bpf.h's)", tcp, want)
	}
	var objs kernObjects
	if err := loadWithoutTCP(spec, &objs); err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	if objs.KvXdp == nil || objs.KvXdpPass == nil || objs.KvIngress == nil || objs.KvEgress == nil || objs.KvReap == nil ||
		objs.KvEntries == nil || objs.KvSocks == nil || objs.KvPort == nil {
		t.Fatalf("loaded without TCP, something else is missing: %+v", objs)
	}
	if objs.KvSockops != nil || objs.KvTcpVerdict != nil || objs.KvTcpMsg != nil {
		t.Fatalf("loaded without TCP, yet: sockops %v verdict %v msg %v", objs.KvSockops, objs.KvTcpVerdict, objs.KvTcpMsg)
	}
}

// TestTCPOnlyWhenAskedFor: Config's zero value, like the CLI's default,
// leaves the TCP programs unloaded (the verifier never sees them); TCP:
// true loads them.
func TestTCPOnlyWhenAskedFor(t *testing.T) {
	testenv.RequireRoot(t)
	for _, on := range []bool{false, true} {
		srv, err := Load(Config{PoolMB: 8, TCP: on})
		if err != nil {
			t.Fatal(err)
		}
		o := srv.objs
		loaded := o.KvSockops != nil && o.KvTcpVerdict != nil && o.KvTcpMsg != nil
		none := o.KvSockops == nil && o.KvTcpVerdict == nil && o.KvTcpMsg == nil
		if o.KvXdp == nil || on && !loaded || !on && !none {
			t.Errorf("TCP %v: xdp %v sockops %v verdict %v msg %v", on, o.KvXdp, o.KvSockops, o.KvTcpVerdict, o.KvTcpMsg)
		}
		srv.Close()
	}
}

// unreadBytes is the Recv-Q of memcached's established connections, from
// ss in the server's namespace: bytes the kernel counts as not yet read.
func (e *kvEnv) unreadBytes(t *testing.T) map[string]int {
	t.Helper()
	out, err := netenv.Command(e.pair.ServerNSName(), "ss", "-tnH", "state", "established", "( sport = :11211 )").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	m := map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			var n int
			fmt.Sscan(f[0], &n)
			m[f[3]] = n
		}
	}
	return m
}

// TestTCPPreAcceptGets: GETs of a cached key that reach memcached's
// connections before memcached accepts them (memcached stopped meanwhile)
// are answered, by memcached: the verdict answers only once memcached has
// replied on a connection, since a segment it redirected during
// memcached's first read stayed counted as unread (kernels failing
// sockmap_self_redirect: memcached then spins on EAGAIN;
// docs/kerby-kv.md, "TCP on each kernel"). No connection keeps unread
// bytes, and the next GETs are answered in the kernel.
func TestTCPPreAcceptGets(t *testing.T) {
	testenv.NeedTool(t, "ss", "iproute2")
	e := newKVEnv(t, "kvpre", Config{TCP: true})
	c := e.tcp(t)
	mustReply(t, must(c.cmd("set k 5 0 5\r\nhello\r\n")), nil, "STORED\r\n")
	time.Sleep(60 * time.Millisecond) // the fill quarantine after a write
	want := "VALUE k 5 5\r\nhello\r\nEND\r\n"
	mustReply(t, must(c.get("get k\r\n")), nil, want) // fills
	hits0 := e.counter(t, "tcp_hits")
	mustReply(t, must(c.get("get k\r\n")), nil, want)
	if e.counter(t, "tcp_hits") == hits0 {
		t.Fatal("the warm GET was not answered in the kernel")
	}
	pid := e.mc.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	const n = 4
	var conns []*tcpClient
	for i := 0; i < n; i++ {
		cc := e.tcp(t) // the kernel completes the handshake; memcached accepts later
		if _, err := cc.c.Write([]byte("get k\r\n")); err != nil {
			syscall.Kill(pid, syscall.SIGCONT)
			t.Fatal(err)
		}
		conns = append(conns, cc)
	}
	time.Sleep(100 * time.Millisecond * time.Duration(testenv.TimeScale()))
	first0, hits1 := e.counter(t, "tcp_pass_first"), e.counter(t, "tcp_hits")
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, cc := range conns {
		cc.c.SetDeadline(time.Now().Add(5 * time.Second * time.Duration(testenv.TimeScale())))
		mustReply(t, must(readReply(cc.r)), nil, want)
	}
	if got := e.counter(t, "tcp_pass_first") - first0; got != n {
		t.Errorf("tcp_pass_first went up by %d, want %d (one GET per connection before memcached's first reply)", got, n)
	}
	if got := e.counter(t, "tcp_hits") - hits1; got != 0 {
		t.Errorf("%d of the GETs sent before the accept were answered in the kernel, want 0", got)
	}
	// The next GET on each is the kernel's; nothing stays unread.
	for _, cc := range conns {
		mustReply(t, must(cc.get("get k\r\n")), nil, want)
	}
	if got := e.counter(t, "tcp_hits") - hits1; got != n {
		t.Errorf("tcp_hits went up by %d after memcached's first replies, want %d", got, n)
	}
	time.Sleep(200 * time.Millisecond * time.Duration(testenv.TimeScale()))
	for peer, q := range e.unreadBytes(t) {
		if q != 0 {
			t.Errorf("connection from %s keeps %d unread bytes (Recv-Q) after every reply", peer, q)
		}
	}
}

// TestTCPDefault: kv serve's TCP default follows the kernel's answers:
// on where the self-redirect self-test passes, opt-in where it fails (as
// on 6.12, 6.18 and 7.2, docs/kerby-kv.md), off without sk_skb verdicts; and on the
// running kernel it agrees with the probe.
func TestTCPDefault(t *testing.T) {
	missing := errors.New("not supported by this kernel")
	for _, c := range []struct {
		lacking string
		on      bool
		why     string
	}{
		{"", true, "on by default"},
		{"sockmap_self_redirect", false, "opt-in (--tcp)"},
		{"sockmap_verdict", false, "off: "},
	} {
		on, why := tcpDefault(func(f string) error {
			if f == c.lacking {
				return missing
			}
			return nil
		})
		if on != c.on || !strings.HasPrefix(why, c.why) {
			t.Errorf("lacking %q: default %v (%s), want %v (%s…)", c.lacking, on, why, c.on, c.why)
		}
	}
	on, why := TCPDefault()
	if want := kernel.Has("sockmap_verdict") == nil && kernel.Has("sockmap_self_redirect") == nil; on != want {
		t.Errorf("on %s: TCP default %v (%s), the probes say %v", kernel.Release(), on, why, want)
	}
	t.Logf("%s: TCP GETs %s", kernel.Release(), why)
}
