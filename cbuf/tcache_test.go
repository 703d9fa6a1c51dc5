package cbuf

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The C client's thread caches (docs/cbuf.md, "Thread cache"): buffers a
// thread freed keep their reference, so the manager must see them as in
// use, reclaim them when the process dies, count them in stats, and get
// them back on the free lists when it asks.

// startCPeer runs the C peer with args and returns its stdin, a line
// reader on its stdout, and the command.
func startCPeer(t *testing.T, name string, args ...string) (io.WriteCloser, *bufio.Scanner, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(buildPeer(t), args...)
	cmd.Env = append(cmd.Environ(), "CBUF_NAME="+name)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return stdin, bufio.NewScanner(out), cmd
}

func readLine(t *testing.T, sc *bufio.Scanner, prefix string) string {
	t.Helper()
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), prefix) {
		t.Fatalf("peer: want %q, got %q (%v)", prefix, sc.Text(), sc.Err())
	}
	return sc.Text()
}

func componentStats(m *Manager, name string) (ComponentStats, bool) {
	for _, c := range m.Stats().Components {
		if c.Name == name {
			return c, true
		}
	}
	return ComponentStats{}, false
}

// A process killed with pages in its thread cache: they were referenced by
// it alone, so the manager reclaims every one with the component.
func TestCThreadCacheReclaimedWhenProcessDies(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{Memory: 8 << 20, Pool: 256 * PageSize, Interval: time.Hour})
	stdin, sc, cmd := startCPeer(t, "tc", sock, "tcache", "40")
	readLine(t, sc, "cached 40")
	cs, ok := componentStats(m, "tc")
	if !ok {
		t.Fatal("the peer is not a component")
	}
	// 40 freed plus what was left of the last batch taken from the free list
	if cs.CachedBuffers < 40 || cs.CachedBuffers > 64 {
		t.Fatalf("cached buffers %d, want 40..64 (stats %+v)", cs.CachedBuffers, cs)
	}
	if live, _ := m.Audit(); live != cs.CachedBuffers {
		t.Fatalf("live buffers %d, cached %d: a cached buffer must count as held", live, cs.CachedBuffers)
	}
	if cs.FreeBuffers+cs.CachedBuffers != cs.Buffers {
		t.Fatalf("free %d + cached %d != buffers %d", cs.FreeBuffers, cs.CachedBuffers, cs.Buffers)
	}
	fmt.Fprintln(stdin, "poke")
	readLine(t, sc, "poked")
	cmd.Process.Kill()
	cmd.Wait()
	waitFor(t, "the dead component's pages reclaimed", 5*time.Second, func() bool {
		s := m.Stats()
		return len(s.Components) == 0 && s.UsedPages == 0 && s.Orphans == 0
	})
	if live, total := m.Audit(); live != 0 || total != 0 {
		t.Fatalf("after the kill: %d live of %d buffers", live, total)
	}
}

// Shrinking below what a thread caches: the cached buffers are held, so the
// first shrink leaves them and asks for them (tc_flush); the thread's next
// call drains its cache to the free list and the next shrink takes them.
func TestCThreadCacheFlushOnShrink(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{Memory: 8 << 20, Pool: 256 * PageSize, Interval: time.Hour})
	stdin, sc, _ := startCPeer(t, "tc", sock, "tcache", "64")
	readLine(t, sc, "cached 64")
	cs, _ := componentStats(m, "tc")
	if cs.CachedBuffers != 64 {
		t.Fatalf("cached %d, want 64 (a full one-page cache)", cs.CachedBuffers)
	}
	m.mu.Lock()
	c := m.comps[cs.Slot]
	c.quota = 16
	m.shrink(c)
	used1, flush1 := c.used, c.hdr.TcFlush
	m.mu.Unlock()
	if used1 != 64 || flush1 == 0 {
		t.Fatalf("after the first shrink: %d pages used (want the 64 cached), tc_flush %d", used1, flush1)
	}
	fmt.Fprintln(stdin, "poke") // drains the cache, then one alloc+free refills half of it
	readLine(t, sc, "poked")
	m.mu.Lock()
	m.shrink(c)
	used2 := c.used
	m.mu.Unlock()
	cs, _ = componentStats(m, "tc")
	if used2 > 32 || used2 != uint64(cs.CachedBuffers) || cs.FreeBuffers != 0 {
		t.Fatalf("after the flush and a second shrink: %d pages used, %d cached, %d free; want only the refilled cache (<= 32)",
			used2, cs.CachedBuffers, cs.FreeBuffers)
	}
	fmt.Fprintln(stdin, "poke") // the pool still serves
	readLine(t, sc, "poked")
}

// Four threads pass buffers to each other (each frees buffers others
// allocated, into its own cache) in a pool smaller than their caches
// together, so collections block and caches are asked back; no buffer is
// handed out twice, and the exiting threads return their caches.
func TestCThreadsHandOffBuffers(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{Memory: 8 << 20, Pool: 128 * PageSize, Interval: time.Hour})
	stdin, sc, cmd := startCPeer(t, "handoff", sock, "handoff", "4", "50000")
	line := readLine(t, sc, "ok ")
	var ok, bad int
	fmt.Sscanf(line, "ok %d bad %d", &ok, &bad)
	if bad != 0 || ok < 4*50000-16 {
		t.Fatalf("handoff: %s", line)
	}
	cs, _ := componentStats(m, "handoff")
	// the workers exited (their caches drained); the main thread freed at most 16
	if cs.CachedBuffers > 16 {
		t.Fatalf("%d buffers cached after the threads exited, want <= 16 (the main thread's)", cs.CachedBuffers)
	}
	if live, _ := m.Audit(); live != cs.CachedBuffers {
		t.Fatalf("live %d, cached %d: every buffer was freed", live, cs.CachedBuffers)
	}
	stdin.Close()
	cmd.Wait()
	waitFor(t, "the component's pages reclaimed", 5*time.Second, func() bool {
		s := m.Stats()
		return len(s.Components) == 0 && s.UsedPages == 0
	})
}
