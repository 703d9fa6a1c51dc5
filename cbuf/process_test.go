package cbuf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// runHelper is the body of a child process started by these tests.
func runHelper(name string) int {
	if name == "iso" {
		return isoHelper() // connects when told to
	}
	c, err := Connect(os.Getenv("CBUF_SOCK"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	switch name {
	case "ring":
		return ringWorker(c)
	case "holder":
		return holder(c)
	}
	return 2
}

type ringMsg struct{ id, nonce, size uint64 }

// ringWorker passes buffers to the next process and receives from the
// previous one, holding, forwarding and freeing them at random, and checks
// every buffer's contents before it lets go: a buffer reused while this
// process holds it would show other bytes.
func ringWorker(c *Client) int {
	iters, _ := strconv.Atoi(os.Getenv("CBUF_ITERS"))
	seed, _ := strconv.ParseInt(os.Getenv("CBUF_SEED"), 10, 64)
	r := rand.New(rand.NewSource(seed))
	in, out := os.NewFile(3, "in"), os.NewFile(4, "out")
	inc := make(chan ringMsg, 1<<16)
	go func() {
		b := make([]byte, 24)
		for {
			if _, err := io.ReadFull(in, b); err != nil {
				close(inc)
				return
			}
			inc <- ringMsg{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}
		}
	}()
	write := func(m ringMsg) {
		b := make([]byte, 24)
		binary.LittleEndian.PutUint64(b, m.id)
		binary.LittleEndian.PutUint64(b[8:], m.nonce)
		binary.LittleEndian.PutUint64(b[16:], m.size)
		out.Write(b)
	}
	var held []ringMsg
	bad, ok := 0, 0
	release := func(i int) {
		m := held[i]
		if b := c.peek(ID(m.id)); b == nil || !check(b[:m.size], m.nonce) {
			bad++
		} else {
			ok++
		}
		c.Free(ID(m.id))
		held[i] = held[len(held)-1]
		held = held[:len(held)-1]
	}
	receive := func(m ringMsg) {
		b, err := c.Buf(ID(m.id), int(m.size))
		if err != nil || !check(b, m.nonce) {
			if os.Getenv("CBUF_DEBUG") != "" {
				_, d, ok := c.metaOf(ID(m.id))
				fmt.Fprintf(os.Stderr, "recv %x size %d: err %v dir %+v ok %v\n", m.id, m.size, err, d, ok)
			}
			bad++
			return
		}
		held = append(held, m)
	}
	finSeen := false
	for i := 0; i < iters; i++ {
	drain:
		for {
			select {
			case m := <-inc:
				if m.id == 0 {
					finSeen = true
					continue
				}
				receive(m)
			default:
				break drain
			}
		}
		switch x := r.Intn(10); {
		case x < 5:
			size := (1 + r.Intn(8)) * PageSize
			b, id, err := c.Alloc(size)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			m := ringMsg{uint64(id), r.Uint64(), uint64(size)}
			fill(b, m.nonce)
			c.Send(id)
			write(m)
			if r.Intn(3) == 0 && len(held) < 4 {
				held = append(held, m)
			} else {
				c.Free(id)
			}
		case x < 8 && len(held) > 0:
			release(r.Intn(len(held)))
		case len(held) > 0:
			m := held[r.Intn(len(held))]
			c.Send(ID(m.id))
			write(m)
		}
		for len(held) > 6 {
			release(0)
		}
	}
	for len(held) > 0 {
		release(0)
	}
	write(ringMsg{}) // FIN
	for m := range chanUnless(finSeen, inc) {
		if finSeen || m.id == 0 {
			break
		}
		receive(m)
		for len(held) > 0 {
			release(0)
		}
	}
	fmt.Printf("ok %d bad %d\n", ok, bad)
	io.Copy(io.Discard, os.Stdin) // stay connected until the test has audited
	return 0
}

// holder allocates and sends buffers, prints them, holds them and whatever
// it is sent on stdin, and waits to be killed.
func holder(c *Client) int {
	for i := 0; i < 10; i++ {
		b, id, err := c.Alloc(2 * PageSize)
		if err != nil {
			return 1
		}
		fill(b, uint64(i)+1000)
		c.Send(id)
		fmt.Printf("%d %d\n", uint64(id), uint64(i)+1000)
	}
	for i := 0; i < 5; i++ {
		c.Alloc(PageSize) // private, never freed
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		id, _ := strconv.ParseUint(sc.Text(), 10, 64)
		if _, err := c.Buf(ID(id), PageSize); err != nil {
			return 1
		}
		fmt.Println("got")
	}
	return 0
}

// chanUnless is nil (nothing to wait for) once the FIN was seen.
func chanUnless(done bool, c chan ringMsg) chan ringMsg {
	if done {
		c2 := make(chan ringMsg)
		close(c2)
		return c2
	}
	return c
}

func helperCmd(sock, name string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"CBUF_TEST_HELPER=" + name, "CBUF_SOCK=" + sock}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// Random send/hold/forward/free across three processes: no buffer changes
// while someone holds it, and at the end every send has been received,
// nothing is referenced, and once the processes leave the pools are empty.
func TestRandomInterleavingsThreeProcesses(t *testing.T) {
	// Room to grow: a worker blocked in Alloc stops freeing what others sent
	// it, so tight memory can make the ring wait on the policy.
	m, sock := startManager(t, ManagerOptions{Memory: 16 << 20, Pool: 128 * PageSize, Interval: 50 * time.Millisecond})
	const n = 3
	var pr, pw [n]*os.File
	for i := range pr {
		var err error
		if pr[i], pw[i], err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
	}
	var cmds [n]*exec.Cmd
	var outs [n]*bufio.Scanner
	var stdins [n]io.WriteCloser
	for i := 0; i < n; i++ {
		cmd := helperCmd(sock, "ring", "CBUF_ITERS=4000", fmt.Sprintf("CBUF_SEED=%d", i+1), fmt.Sprintf("CBUF_NAME=w%d", i))
		cmd.ExtraFiles = []*os.File{pr[(i+n-1)%n], pw[i]} // from the previous, to the next
		stdins[i], _ = cmd.StdinPipe()
		o, _ := cmd.StdoutPipe()
		outs[i] = bufio.NewScanner(o)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i := range pr {
		pr[i].Close()
		pw[i].Close()
	}
	total := 0
	for i := 0; i < n; i++ {
		if !outs[i].Scan() {
			t.Fatalf("worker %d ended without a result", i)
		}
		var ok, bad int
		fmt.Sscanf(outs[i].Text(), "ok %d bad %d", &ok, &bad)
		if bad != 0 {
			t.Errorf("worker %d: %d buffers changed or vanished while held (%d intact)", i, bad, ok)
		}
		total += ok
	}
	if total < 1000 {
		t.Errorf("only %d buffers were held and checked", total)
	}
	live, buffers := m.Audit()
	if live != 0 {
		t.Errorf("after every process freed everything, %d of %d buffers still look referenced or in flight", live, buffers)
		m.mu.Lock()
		for _, c := range m.comps {
			if c == nil {
				continue
			}
			for _, idx := range c.owned {
				g := m.g(c.slot, idx)
				if m.live(g) {
					var ws []string
					for _, o := range m.comps {
						if o != nil {
							w := atomic.LoadUint64(&o.metas[g].Cnt)
							ws = append(ws, fmt.Sprintf("c%d ref %d sent %d recv %d fl %x", o.slot, cnt(w, refShift), cnt(w, sentShift), cnt(w, recvShift), w>>flagShift))
						}
					}
					t.Logf("live %d/%d state %d next %x: %v", c.slot, idx, c.bufs[idx].state, c.metas[g].Next, ws)
				}
			}
		}
		m.mu.Unlock()
	}
	s := m.Stats()
	var collected uint64
	for _, c := range s.Components {
		collected += c.Collected
	}
	if collected == 0 {
		t.Error("no collections happened: the pools were never exhausted")
	}
	for i := range cmds {
		stdins[i].Close()
		if err := cmds[i].Wait(); err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	waitFor(t, "the pools to empty after the processes left", 5*time.Second, func() bool {
		s := m.Stats()
		return len(s.Components) == 0 && s.UsedPages == 0
	})
	t.Logf("%d buffers checked, %d collected", total, collected)
}

// kill -9 of a component: its references go, buffers it held of others
// become collectable, its own buffers that another holds stay intact until
// freed, and then its whole pool is reclaimed.
func TestKill9Recovery(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{Interval: 20 * time.Millisecond})
	b, err := ConnectWith(sock, ClientOptions{Name: "survivor"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cmd := helperCmd(sock, "holder", "CBUF_NAME=victim")
	stdin, _ := cmd.StdinPipe()
	o, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(o)
	type got struct {
		id    ID
		nonce uint64
	}
	var held []got
	for i := 0; i < 10 && sc.Scan(); i++ {
		var id, nonce uint64
		fmt.Sscan(sc.Text(), &id, &nonce)
		buf, err := b.Buf(ID(id), 2*PageSize)
		if err != nil || !check(buf, nonce) {
			t.Fatalf("buffer %d from the victim: %v", i, err)
		}
		if i%2 == 0 {
			held = append(held, got{ID(id), nonce})
		} else {
			b.Free(ID(id))
		}
	}
	// the victim takes references on three of ours
	var mine []ID
	for i := 0; i < 3; i++ {
		_, id, _ := b.Alloc(PageSize)
		b.Send(id)
		b.Free(id)
		mine = append(mine, id)
		fmt.Fprintln(stdin, uint64(id))
		if !sc.Scan() || sc.Text() != "got" {
			t.Fatal("victim did not take the buffer")
		}
	}
	if live, _ := m.Audit(); live != 10+5+3 {
		t.Fatalf("before the kill %d buffers are live, want 18", live)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitFor(t, "the victim's unheld buffers to be reclaimed", 5*time.Second, func() bool {
		live, _ := m.Audit()
		return live == len(held)
	})
	for _, h := range held {
		buf := b.peek(h.id)
		if buf == nil || !check(buf[:2*PageSize], h.nonce) {
			t.Fatal("a buffer the survivor holds changed or vanished when its owner was killed")
		}
	}
	s := m.Stats()
	if s.Orphans != len(held) {
		t.Fatalf("%d orphan buffers, want the %d the survivor holds", s.Orphans, len(held))
	}
	for _, h := range held {
		b.Free(h.id)
	}
	waitFor(t, "the victim's slot to be freed", 5*time.Second, func() bool {
		s := m.Stats()
		return len(s.Components) == 1 && s.Orphans == 0
	})
	// our three buffers the victim held are collectable again: exhaust the pool
	seen := map[uint32]bool{}
	for i := 0; i < int(m.opt.Pool/PageSize); i++ {
		_, id, err := b.Alloc(PageSize)
		if err != nil {
			t.Fatal(err)
		}
		seen[id.Index()] = true
	}
	for _, id := range mine {
		if !seen[id.Index()] {
			t.Errorf("buffer %x the killed process held was never collected", id)
		}
	}
}

// A component that scribbles over its own metadata cannot get a buffer
// another component holds freed: the manager reads every holder's own
// counters and sizes from its own records.
func TestCorruptMetadataCannotFreeOthersBuffer(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{Memory: 1 << 20, Pool: 64 * PageSize})
	a, _ := ConnectWith(sock, ClientOptions{Name: "liar"})
	defer a.Close()
	b, _ := ConnectWith(sock, ClientOptions{Name: "holder"})
	defer b.Close()
	buf, x, _ := a.Alloc(PageSize)
	fill(buf, 77)
	a.Send(x)
	held, err := b.Buf(x, PageSize)
	if err != nil {
		t.Fatal(err)
	}
	a.Free(x)
	// The liar claims x was never shared or received, in every way it can.
	gx := a.g(x.Slot(), x.Index())
	for _, w := range []uint64{0, 5*sent1 + 5*recv1, sent1 + 6*recv1, 0xffff * sent1} {
		atomic.StoreUint64(&a.metas[gx].Cnt, w)
		atomic.StoreUint32(&a.metas[gx].Next, 0)
		a.hdr.RingTail = a.hdr.RingHead + 12345 // and confuses the ring
		if n := m.collectOnce(a.slot, 0); n < -RingSize {
			t.Fatal("collect failed")
		}
		a.hdr.RingTail = atomic.LoadUint32(&a.hdr.RingHead)
		for i := 0; i < 4; i++ {
			head := atomic.LoadUint32(&a.hdr.RingHead)
			m.collectOnce(a.slot, 0)
			for j := head; j != atomic.LoadUint32(&a.hdr.RingHead); j++ {
				if a.hdr.Ring[j%RingSize] == x.Index() {
					t.Fatalf("with its counter word at %#x the liar got back a buffer another component holds", w)
				}
			}
			a.drainRing()
		}
	}
	if !check(held, 77) {
		t.Fatal("the held buffer changed")
	}
	if d := loadDir(&m.dir[gx]); d.Gen != x.Gen() || d.NPages != 1 {
		t.Fatal("the held buffer was invalidated")
	}
}

func (m *Manager) collectOnce(slot uint32, k int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.collect(m.comps[slot], k)
}

var _ = strings.TrimSpace
