package cbuf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestLayoutMatchesC(t *testing.T) {
	out, err := exec.Command(buildPeer(t), "x", "layout").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uintptr{
		"cbuf_meta": unsafe.Sizeof(Meta{}), "cbuf_meta.cnt": unsafe.Offsetof(Meta{}.Cnt), "cbuf_meta.next": unsafe.Offsetof(Meta{}.Next),
		"cbuf_dir": unsafe.Sizeof(Dir{}), "cbuf_dir.page_off": unsafe.Offsetof(Dir{}.PageOff), "cbuf_dir.npages": unsafe.Offsetof(Dir{}.NPages), "cbuf_dir.gen": unsafe.Offsetof(Dir{}.Gen),
		"cbuf_hdr": unsafe.Sizeof(Hdr{}), "cbuf_hdr.slot": unsafe.Offsetof(Hdr{}.Slot), "cbuf_hdr.max_bufs": unsafe.Offsetof(Hdr{}.MaxBufs),
		"cbuf_hdr.pool_bytes": unsafe.Offsetof(Hdr{}.PoolBytes), "cbuf_hdr.meta_off": unsafe.Offsetof(Hdr{}.MetaOff),
		"cbuf_hdr.free_heads": unsafe.Offsetof(Hdr{}.FreeHeads), "cbuf_hdr.allocs": unsafe.Offsetof(Hdr{}.Allocs),
		"cbuf_hdr.blocked_ns": unsafe.Offsetof(Hdr{}.BlockedNs), "cbuf_hdr.tc_flush": unsafe.Offsetof(Hdr{}.TcFlush), "cbuf_hdr.ring_head": unsafe.Offsetof(Hdr{}.RingHead),
		"cbuf_hdr.ring_tail": unsafe.Offsetof(Hdr{}.RingTail), "cbuf_hdr.ring": unsafe.Offsetof(Hdr{}.Ring),
		"cbuf_hdr.slot_epoch": unsafe.Offsetof(Hdr{}.SlotEpoch),
		"cbuf_agg":            unsafe.Sizeof(aggHdr{}), "cbuf_agg.n": unsafe.Offsetof(aggHdr{}.N), "cbuf_agg.cap": unsafe.Offsetof(aggHdr{}.Cap),
		"cbuf_agg_ent": unsafe.Sizeof(AggEnt{}), "cbuf_agg_ent.off": unsafe.Offsetof(AggEnt{}.Off), "cbuf_agg_ent.len": unsafe.Offsetof(AggEnt{}.Len),
		"cbuf_msg": unsafe.Sizeof(msg{}), "cbuf_msg.arg2": unsafe.Offsetof(msg{}.Arg2), "cbuf_msg.name": unsafe.Offsetof(msg{}.Name),
		"cbuf_reply":          unsafe.Sizeof(reply{}),
		"CBUF_F_INCONSISTENT": uintptr(FlagInconsistent), "CBUF_F_RELINQUISH": uintptr(FlagRelinquish),
		"CBUF_RECV1": uintptr(recv1), "CBUF_SENT1": uintptr(sent1), "CBUF_NEXT_CACHED": uintptr(nextCached),
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		v, _ := strconv.ParseUint(f[1], 10, 64)
		w, ok := want[f[0]]
		if !ok {
			t.Errorf("C prints %s, which the Go mirror does not check", f[0])
			continue
		}
		seen++
		if uintptr(v) != w {
			t.Errorf("%s: C %d, Go %d", f[0], v, w)
		}
	}
	if seen != len(want) {
		t.Errorf("checked %d of %d layout facts", seen, len(want))
	}
}

func TestAllocFreeSendRecv(t *testing.T) {
	_, sock := startManager(t, ManagerOptions{})
	a, err := ConnectWith(sock, ClientOptions{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ConnectWith(sock, ClientOptions{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, size := range []int{1, 4096, 4097, 64 * 4096} {
		buf, id, err := a.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		if len(buf) < size || len(buf)%PageSize != 0 {
			t.Fatalf("size %d: got %d bytes", size, len(buf))
		}
		fill(buf, 42)
		a.Send(id)
		got, err := b.Buf(id, len(buf))
		if err != nil {
			t.Fatal(err)
		}
		if !check(got, 42) {
			t.Fatal("receiver sees other bytes than the sender wrote")
		}
		if _, err := b.Buf(id, len(buf)+1); err == nil {
			t.Fatal("Buf with a size larger than the buffer succeeded")
		}
		b.Free(id)
		a.Free(id)
	}
	for _, bad := range []int{0, -1, 64*4096 + 1} {
		if _, _, err := a.Alloc(bad); err == nil {
			t.Errorf("Alloc(%d) succeeded", bad)
		}
	}
	if _, err := b.Buf(makeID(0, 63, 12345), 1); err == nil {
		t.Error("Buf of an id that was never allocated succeeded")
	}
}

// A private buffer (never sent) is reused at once from the free list; a
// shared one only after every component let go and the manager collected it.
func TestCollectionWaitsForReceivers(t *testing.T) {
	// No policy tick during the test: one could grow a's pool while it is
	// being exhausted (the 63 allocations outlast a 250 ms tick under TCG).
	m, sock := startManager(t, ManagerOptions{Memory: 1 << 20, Pool: 64 * PageSize, Interval: time.Hour})
	a, _ := ConnectWith(sock, ClientOptions{Name: "a"})
	defer a.Close()
	b, _ := ConnectWith(sock, ClientOptions{Name: "b"})
	defer b.Close()
	_, id, err := a.Alloc(PageSize)
	if err != nil {
		t.Fatal(err)
	}
	a.Free(id)
	_, id2, _ := a.Alloc(PageSize)
	if id2 != id {
		t.Fatalf("a private buffer was not reused from the free list: %x then %x", id, id2)
	}
	a.Send(id2)
	_, err = b.Buf(id2, PageSize)
	if err != nil {
		t.Fatal(err)
	}
	a.Free(id2)
	// Exhaust a's pool (64 pages): id2 must not come back while b holds it.
	var ids []ID
	for i := 0; i < 63; i++ {
		buf, x, err := a.Alloc(PageSize)
		if err != nil {
			t.Fatal(err)
		}
		if x.Index() == id2.Index() {
			t.Fatal("buffer reused while another component holds it")
		}
		buf[0] = 1
		ids = append(ids, x)
	}
	done := make(chan ID)
	go func() { _, x, _ := a.Alloc(PageSize); done <- x }()
	select {
	case x := <-done:
		t.Fatalf("allocation beyond the pool succeeded while b holds the last buffer: %x", x)
	case <-time.After(100 * time.Millisecond):
	}
	b.Free(id2) // now dead everywhere: the blocked allocation gets it
	select {
	case x := <-done:
		if x.Index() != id2.Index() {
			t.Fatalf("got %x, want the collected %x", x, id2)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocked allocation never got the collected buffer")
	}
	s := m.Stats()
	if s.Components[0].Collected == 0 || s.Components[0].Blocks == 0 {
		t.Fatalf("stats do not show the collection and the block: %+v", s.Components[0])
	}
}

// A receiver's mapping is read-only: writing faults (here a Go panic).
func TestWriteToReceivedBufferFaults(t *testing.T) {
	_, sock := startManager(t, ManagerOptions{})
	a, _ := ConnectWith(sock, ClientOptions{Name: "a"})
	defer a.Close()
	b, _ := ConnectWith(sock, ClientOptions{Name: "b"})
	defer b.Close()
	buf, id, _ := a.Alloc(PageSize)
	buf[0] = 7
	a.Send(id)
	got, err := b.Buf(id, PageSize)
	if err != nil {
		t.Fatal(err)
	}
	faulted := func() (f bool) {
		old := debug.SetPanicOnFault(true)
		defer debug.SetPanicOnFault(old)
		defer func() { f = recover() != nil }()
		got[0] = 9
		return false
	}()
	if !faulted {
		t.Fatal("writing a received buffer did not fault")
	}
	if buf[0] != 7 {
		t.Fatal("the receiver changed the sender's data")
	}
}

// C writer: the C library also maps received buffers read-only.
func TestCWriteToReceivedBufferFaults(t *testing.T) {
	peer := buildPeer(t)
	_, sock := startManager(t, ManagerOptions{})
	a, _ := ConnectWith(sock, ClientOptions{Name: "go"})
	defer a.Close()
	buf, id, _ := a.Alloc(PageSize)
	buf[0] = 7
	a.Send(id)
	cmd := exec.Command(peer, sock, "write", fmt.Sprint(uint64(id)), "4096")
	out, err := cmd.Output()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGSEGV {
		t.Fatalf("C peer writing a received buffer: %v, output %q; want death by SIGSEGV", err, out)
	}
	if string(out) != "mapped\n" || buf[0] != 7 {
		t.Fatalf("output %q, byte %d", out, buf[0])
	}
	out, _ = exec.Command(peer, sock, "big", fmt.Sprint(uint64(id)), "4097").Output()
	if string(out) != "null\n" {
		t.Fatalf("C cbuf2buf with a size beyond the buffer: %q, want null", out)
	}
	out, _ = exec.Command(peer, sock, "big", fmt.Sprint(uint64(id)), "4096").Output()
	if string(out) != "mapped\n" {
		t.Fatalf("C cbuf2buf with the right size: %q", out)
	}
}

func TestCSenderGoReceiver(t *testing.T) {
	peer := buildPeer(t)
	_, sock := startManager(t, ManagerOptions{})
	g, _ := ConnectWith(sock, ClientOptions{Name: "go"})
	defer g.Close()
	const n, size = 200, 3 * PageSize
	cmd := exec.Command(peer, sock, "send", fmt.Sprint(n), fmt.Sprint(size))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	ok := 0
	for sc.Scan() {
		var id, nonce uint64
		fmt.Sscan(sc.Text(), &id, &nonce)
		b, err := g.Buf(ID(id), size)
		if err != nil {
			t.Fatal(err)
		}
		if check(b, nonce) {
			ok++
		}
		g.Free(ID(id))
		if ok == n {
			break
		}
	}
	stdin.Close()
	cmd.Wait()
	if ok != n {
		t.Fatalf("%d of %d buffers from C arrived intact", ok, n)
	}
}

func TestGoSenderCReceiver(t *testing.T) {
	peer := buildPeer(t)
	_, sock := startManager(t, ManagerOptions{})
	g, _ := ConnectWith(sock, ClientOptions{Name: "go"})
	defer g.Close()
	const n, size = 200, 2 * PageSize
	cmd := exec.Command(peer, sock, "recv", fmt.Sprint(size))
	var in strings.Builder
	for i := 0; i < n; i++ {
		b, id, err := g.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		nonce := uint64(i)*0x9e3779b97f4a7c15 + 1
		fill(b, nonce)
		g.Send(id)
		fmt.Fprintf(&in, "%d %d\n", uint64(id), nonce)
		g.Free(id)
	}
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != fmt.Sprintf("ok %d bad 0", n) {
		t.Fatalf("C receiver: %s", out)
	}
}

func TestAggregate(t *testing.T) {
	_, sock := startManager(t, ManagerOptions{})
	a, _ := ConnectWith(sock, ClientOptions{Name: "a"})
	defer a.Close()
	b, _ := ConnectWith(sock, ClientOptions{Name: "b"})
	defer b.Close()
	hdr, hid, _ := a.Alloc(64)
	copy(hdr, "HEADER")
	body, bid, _ := a.Alloc(3 * PageSize)
	copy(body[100:], "payload")
	agg, err := a.AggAlloc(4)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AggAppend(agg, bid, 100, 7); err != nil {
		t.Fatal(err)
	}
	if err := a.AggPrepend(agg, hid, 0, 6); err != nil {
		t.Fatal(err)
	}
	if err := a.AggAppend(agg, bid, 0, 5*PageSize); err == nil {
		t.Fatal("an entry beyond its buffer was accepted")
	}
	for _, id := range []ID{agg, hid, bid} {
		a.Send(id)
	}
	if _, err := b.Buf(agg, 16); err != nil {
		t.Fatal(err)
	}
	ents, err := b.AggEntries(agg)
	if err != nil || len(ents) != 2 {
		t.Fatalf("entries %v, %v", ents, err)
	}
	var got string
	for _, e := range ents {
		p, err := b.Buf(ID(e.ID), int(e.Off+e.Len))
		if err != nil {
			t.Fatal(err)
		}
		got += string(p[e.Off : e.Off+e.Len])
	}
	if got != "HEADERpayload" {
		t.Fatalf("aggregate reads %q", got)
	}
}

// An aggregate built by the C library reads the same from Go.
func TestCAggregateGoReader(t *testing.T) {
	peer := buildPeer(t)
	_, sock := startManager(t, ManagerOptions{})
	g, _ := ConnectWith(sock, ClientOptions{Name: "go"})
	defer g.Close()
	cmd := exec.Command(peer, sock, "agg")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("C peer built no aggregate")
	}
	id, _ := strconv.ParseUint(sc.Text(), 10, 64)
	if _, err := g.Buf(ID(id), 16); err != nil {
		t.Fatal(err)
	}
	ents, err := g.AggEntries(ID(id))
	if err != nil || len(ents) != 2 {
		t.Fatalf("entries %v, %v", ents, err)
	}
	var got string
	for _, e := range ents {
		p, err := g.Buf(ID(e.ID), int(e.Off+e.Len))
		if err != nil {
			t.Fatal(err)
		}
		got += string(p[e.Off : e.Off+e.Len])
	}
	if got != "HDR:payload from C" {
		t.Fatalf("aggregate reads %q", got)
	}
}

// Threads of one C component allocate and free concurrently from the same
// lock-free free lists (and collections): no buffer is handed to two
// threads at once.
func TestCThreadsShareFreeLists(t *testing.T) {
	peer := buildPeer(t)
	_, sock := startManager(t, ManagerOptions{Memory: 8 << 20, Pool: 128 * PageSize})
	out, err := exec.Command(peer, sock, "threads", "4", "100000").Output()
	if err != nil {
		t.Fatal(err)
	}
	var ok, bad int
	fmt.Sscanf(string(out), "ok %d bad %d", &ok, &bad)
	if bad != 0 || ok < 50000 {
		t.Fatalf("threads: %s", out)
	}
}

// Malformed requests are dropped and counted; the manager keeps serving.
func TestMalformedRequestsAreCounted(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{})
	raw := func(b []byte) {
		c, err := net.Dial("unixpacket", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		c.SetReadDeadline(time.Now().Add(time.Second))
		c.Read(make([]byte, 64))
		c.Close()
	}
	raw([]byte("hello"))    // wrong size
	raw(make([]byte, 64))   // op 0 before HELLO
	bad := make([]byte, 64) // COLLECT before HELLO
	binary.LittleEndian.PutUint32(bad, opCollect)
	raw(bad)
	c, err := ConnectWith(sock, ClientOptions{Name: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.xchg(msg{Op: opCollect, Arg: 99}, 0); err == nil {
		t.Fatal("a collection of size class 99 was accepted")
	}
	if _, _, err := c.Alloc(PageSize); err != nil {
		t.Fatalf("the manager stopped serving: %v", err)
	}
	waitFor(t, "the drops to be counted", 5*time.Second, func() bool { return m.Stats().Drops >= 4 })
}

// A forked child connects as its own component and receives the parent's
// buffer like any other.
func TestCForkedChildConnects(t *testing.T) {
	peer := buildPeer(t)
	_, sock := startManager(t, ManagerOptions{})
	out, err := exec.Command(peer, sock, "fork").Output()
	if err != nil || string(out) != "child ok\n" {
		t.Fatalf("fork: %v %q", err, out)
	}
}

// Goroutines share one Go client's free lists and collections.
func TestGoClientConcurrent(t *testing.T) {
	_, sock := startManager(t, ManagerOptions{Memory: 8 << 20, Pool: 128 * PageSize})
	c, err := ConnectWith(sock, ClientOptions{Name: "go"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := 0; i < 20000; i++ {
				b, id, err := c.Alloc((1 + i%3) * PageSize)
				if err != nil {
					errs <- err
					return
				}
				nonce := uint64(g)<<56 | uint64(i)
				fill(b[:64], nonce)
				if i%7 == 0 {
					c.Send(id) // shared: comes back only through collection
					if got, err := c.Buf(id, 64); err != nil || !check(got, nonce) {
						errs <- fmt.Errorf("buffer changed while held: %v", err)
						return
					}
					c.Free(id)
				}
				if !check(b[:64], nonce) {
					errs <- fmt.Errorf("goroutine %d: buffer %x changed while held", g, id)
					return
				}
				c.Free(id)
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A component that takes the slot of one that left is read from its own
// pool: receivers (Go and C) that mapped the former one's pool drop it
// (Hdr.SlotEpoch), whether the new one exports or not.
func TestSlotReuseAcrossExport(t *testing.T) {
	_, sock := startManager(t, ManagerOptions{})
	b, err := ConnectWith(sock, ClientOptions{Name: "receiver"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	crecv := exec.Command(buildPeer(t), sock, "recv", "4096")
	cin, _ := crecv.StdinPipe()
	var cout strings.Builder
	crecv.Stdout = &cout
	if err := crecv.Start(); err != nil {
		t.Fatal(err)
	}
	slot := -1
	for round, export := range []bool{false, false, true, false} {
		a, err := ConnectWith(sock, ClientOptions{Name: "sender"})
		if err != nil {
			t.Fatal(err)
		}
		if slot >= 0 && int(a.Slot()) != slot {
			t.Fatalf("round %d: the sender got slot %d, not the freed %d", round, a.Slot(), slot)
		}
		slot = int(a.Slot())
		if export {
			if err := a.Export(); err != nil {
				t.Fatal(err)
			}
		}
		buf, id, err := a.Alloc(PageSize)
		if err != nil {
			t.Fatal(err)
		}
		nonce := uint64(1000 + round)
		fill(buf, nonce)
		a.Send(id)
		a.Send(id)
		got, err := b.Buf(id, PageSize)
		if err != nil || !check(got, nonce) {
			t.Fatalf("round %d (export %v): the Go receiver read the former component's pool (%v)", round, export, err)
		}
		b.Free(id)
		fmt.Fprintf(cin, "%d %d\n", id, nonce)
		// leave: the slot is free once the C receiver has freed it too
		a.Free(id)
		a.Close()
		waitFor(t, "the slot to be free", 10*time.Second*testenv.TimeScale(), func() bool {
			s, _ := QueryStats(sock)
			for _, c := range s.Components {
				if int(c.Slot) == slot {
					return false
				}
			}
			return true
		})
	}
	cin.Close()
	crecv.Wait()
	if strings.TrimSpace(cout.String()) != "ok 4 bad 0" {
		t.Fatalf("C receiver across slot reuse: %q", cout.String())
	}
}
