package cbuf

// GC and liveness: which buffers are dead, handing them back through the
// ring, and reclaiming what departed components leave.

import (
	"context"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ---- liveness ----

// live reports whether buffer g may still be referenced: some component
// holds a reference, or not every send has been received. It reads every
// live component's counter word twice and treats any change as live.
func (m *Manager) live(g uint64) bool {
	var snap [MaxComponents]uint64
	for pass := 0; pass < 2; pass++ {
		sent, recv := int64(0), int64(0)
		if len(m.adj) > 0 { // only after a component died with sends in flight
			sent = m.adj[g]
		}
		for i, c := range m.alive {
			if m.mixed && !m.counts(c, g) {
				continue // another uid's word for a buffer it was never given
			}
			w := atomic.LoadUint64(&c.metas[g].Cnt)
			if pass == 1 && w != snap[i] {
				return true
			}
			snap[i] = w
			if cnt(w, refShift) != 0 {
				return true
			}
			sent += int64(cnt(w, sentShift))
			recv += int64(cnt(w, recvShift))
		}
		if sent != recv {
			return true
		}
	}
	return false
}

func (m *Manager) refreshAlive() {
	m.alive = m.alive[:0]
	m.mixed = false
	var first *component
	for _, c := range m.comps {
		if c == nil {
			continue
		}
		// gone owners count too: their buffers' holders may be another uid
		if first == nil {
			first = c
		}
		m.mixed = m.mixed || c.uid != first.uid
		if c.alive {
			m.alive = append(m.alive, c)
		}
	}
}

// resetCounts subtracts the counts seen in every component's word for a
// dead buffer (atomic subtraction keeps any count a misbehaving client adds
// meanwhile) and then checks it is still dead.
func (m *Manager) resetCounts(g uint64) bool {
	for _, c := range m.alive {
		p := &c.metas[g].Cnt
		w := atomic.LoadUint64(p)
		counts := w &^ flagMask &^ (0xffff << refShift)
		if counts != 0 {
			atomic.AddUint64(p, -counts)
		}
		if w&FlagRelinquish != 0 {
			clearFlag(p, FlagRelinquish)
		}
	}
	if len(m.adj) > 0 {
		delete(m.adj, g)
	}
	return !m.live(g)
}

func clearFlag(p *uint64, f uint64) {
	for {
		w := atomic.LoadUint64(p)
		if w&f == 0 || atomic.CompareAndSwapUint64(p, w, w&^f) {
			return
		}
	}
}

func setFlag(p *uint64, f uint64) {
	for {
		w := atomic.LoadUint64(p)
		if w&f != 0 || atomic.CompareAndSwapUint64(p, w, w|f) {
			return
		}
	}
}

// ---- collection ----

// collect finds c's dead buffers, returns them through the ring and, when
// none of class k is among them, creates new ones within c's quota. It
// returns how many buffers it pushed; with the lock held.
func (m *Manager) collect(c *component, k int) int {
	t0 := time.Now()
	defer func() { c.collectNs += int64(time.Since(t0)) }()
	c.collections++
	pages := uint32(1) << k
	var dead []uint32
	haveK := false
	for _, idx := range c.owned {
		b := &c.bufs[idx]
		if b.state != bufClient {
			continue
		}
		g := m.g(c.slot, idx)
		w := atomic.LoadUint64(&c.metas[g].Cnt)
		if cnt(w, refShift) != 0 || (cnt(w, sentShift) == 0 && w&FlagGranted == 0) || atomic.LoadUint32(&c.metas[g].Next) != 0 {
			continue // in use, never shared (free list or private), or on the free list
		}
		if m.live(g) || !m.resetCounts(g) {
			continue
		}
		if b.xuid {
			// another uid maps this memfd for good: never hand it back
			defer m.destroy(c, idx)
			continue
		}
		dead = append(dead, idx)
		if uint32(b.npages) == pages {
			haveK = true
		}
	}
	// Room for class k: recycle dead buffers of other sizes first.
	if !haveK {
		for i := 0; i < len(dead) && c.used+uint64(pages) > c.quota; {
			m.destroy(c, dead[i])
			dead = append(dead[:i], dead[i+1:]...)
		}
	}
	n := 0
	for _, idx := range dead {
		if !m.pushRing(c, idx) {
			break
		}
		n++
	}
	c.collected += uint64(n)
	// Top the batch of class k up with new buffers while the quota allows,
	// so a larger pool means rarer collections (the paper's Figure 7).
	nk := 0
	for _, idx := range dead {
		if uint32(c.bufs[idx].npages) == pages {
			nk++
		}
	}
	want := min(int((c.quota-min(c.quota, c.used))/uint64(pages))/2, collectBatch-nk)
	if !haveK {
		want = max(want, 1)
	}
	for i := 0; i < want; i++ {
		idx, ok := m.create(c, pages)
		if !ok {
			break
		}
		if !m.pushRing(c, idx) {
			m.destroy(c, idx)
			break
		}
		n++
		haveK = true
	}
	if !haveK {
		return -n - 1 // nothing of class k yet: the caller blocks
	}
	return n
}

func (m *Manager) pushRing(c *component, idx uint32) bool {
	head := c.hdr.RingHead
	tail := atomic.LoadUint32(&c.hdr.RingTail)
	if head-tail >= RingSize {
		return false
	}
	c.hdr.Ring[head&(RingSize-1)] = idx
	atomic.StoreUint32(&c.hdr.RingHead, head+1)
	return true
}

// collectBlocking runs collections until one yields a buffer of class k,
// counting the time in between as c's blocked time. -1 when ctx ends.
func (m *Manager) collectBlocking(ctx context.Context, c *component, k int) int {
	var t0 time.Time
	for {
		m.mu.Lock()
		n := m.collect(c, k)
		if n < 0 && c.hdr != nil && freeListed(c, k) {
			n = 0 // the client pops that instead
		}
		if n >= 0 {
			if !t0.IsZero() {
				c.blockedNs += int64(time.Since(t0))
				c.blockedSince = time.Time{}
			}
			m.mu.Unlock()
			return n
		}
		if t0.IsZero() {
			t0 = time.Now()
			c.blockedSince = t0
			c.blocks++
			if c.hdr != nil {
				atomic.AddUint64(&c.hdr.TcFlush, 1) // the client's other threads: give back your caches
			}
			m.askRelinquish(c)
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return -1
		case <-m.wake:
		case <-time.After(250 * time.Microsecond):
		}
	}
}

// askRelinquish flags c's shared buffers in every other component (held or
// still in flight to it) so the free that drops the last reference tells
// the manager at once; the owner's own word only when it has sent it, since
// a flagged private buffer would not go back to the free list.
func (m *Manager) askRelinquish(c *component) {
	for _, idx := range c.owned {
		if c.bufs[idx].state != bufClient {
			continue
		}
		g := m.g(c.slot, idx)
		if cnt(atomic.LoadUint64(&c.metas[g].Cnt), sentShift) == 0 {
			continue
		}
		for _, o := range m.comps {
			if o == nil || !o.alive {
				continue
			}
			setFlag(&o.metas[g].Cnt, FlagRelinquish)
		}
	}
}

// relinquished handles a holder's note that a flagged buffer lost its last
// reference: a blocked owner retries, an owner over quota shrinks now.
func (m *Manager) relinquished(id ID) {
	m.mu.Lock()
	if id.Slot() == KernelSlot && m.kern != nil {
		m.reapKernel()
	} else if s := id.Slot(); s < MaxComponents {
		if c := m.comps[s]; c != nil && c.alive && c.used > c.quota {
			m.shrink(c)
		}
	}
	m.mu.Unlock()
	m.poke()
}

// shrink brings c's pool towards its quota: dead buffers go, then free-list
// buffers are popped off the client's lists (the client's own tagged CAS,
// so no client thread can be taking the same one) and destroyed. What the
// C client's thread caches hold is referenced: they are asked back
// (tc_flush) and the next shrink finds them on the lists.
func (m *Manager) shrink(c *component) {
	if c.used <= c.quota {
		return
	}
	for _, idx := range append([]uint32(nil), c.owned...) {
		if c.used <= c.quota {
			return
		}
		b := &c.bufs[idx]
		if b.state != bufClient {
			continue
		}
		g := m.g(c.slot, idx)
		w := atomic.LoadUint64(&c.metas[g].Cnt)
		if cnt(w, refShift) != 0 || atomic.LoadUint32(&c.metas[g].Next) != 0 {
			continue
		}
		if cnt(w, sentShift) != 0 && !m.live(g) && m.resetCounts(g) {
			m.destroy(c, idx)
		}
	}
	for k := Classes - 1; k >= 0 && c.used > c.quota; k-- {
		for c.used > c.quota {
			idx, ok := m.popFree(c, k)
			if !ok {
				break
			}
			// a sane list holds only unreferenced, unshared buffers of
			// c's; anything else stays off the lists (collection finds
			// it if it is garbage, its free puts it back if it is held)
			g := m.g(c.slot, idx)
			if c.bufs[idx].state == bufClient && atomic.LoadUint64(&c.metas[g].Cnt) == 0 && !m.live(g) {
				m.destroy(c, idx)
			}
		}
	}
	if c.used > c.quota {
		// the rest is referenced: hear from the holders as they let go,
		// and have the client's threads return their caches
		if c.hdr != nil {
			atomic.AddUint64(&c.hdr.TcFlush, 1)
		}
		m.askRelinquish(c)
	}
}

// popFree takes the top buffer off c's class-k free list as a client pops
// (Treiber stack, head = tag<<32 | index+1, the tag bumped on every change).
// The client writes these words, so a bad head or link ends the list, and a
// head that keeps changing under the CAS gives up.
func (m *Manager) popFree(c *component, k int) (uint32, bool) {
	head := &c.hdr.FreeHeads[k]
	for try := 0; try < 64; try++ {
		h := atomic.LoadUint64(head)
		top := uint32(h)
		if top == 0 || top > m.maxBufs {
			return 0, false
		}
		g := m.g(c.slot, top-1)
		nx := atomic.LoadUint32(&c.metas[g].Next)
		if nx == nextEnd || nx > m.maxBufs {
			nx = 0
		}
		if atomic.CompareAndSwapUint64(head, h, (h>>32+1)<<32|uint64(nx)) {
			atomic.StoreUint32(&c.metas[g].Next, 0)
			return top - 1, true
		}
	}
	return 0, false
}

// freeListed reports whether c's class-k free list has a buffer (a C
// thread drained its cache there while another thread waited to collect).
func freeListed(c *component, k int) bool {
	return uint32(atomic.LoadUint64(&c.hdr.FreeHeads[k])) != 0
}

// disconnect drops a dead or departed component's references, keeps its
// send/receive balance and reclaims every buffer of its pool nobody else
// holds; the rest become orphans reclaimed when they die.
func (m *Manager) disconnect(c *component) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.comps {
		if o == nil {
			continue
		}
		for _, idx := range o.owned {
			g := m.g(o.slot, idx)
			if m.mixed && !m.counts(c, g) {
				continue
			}
			w := atomic.LoadUint64(&c.metas[g].Cnt)
			if d := int64(cnt(w, sentShift)) - int64(cnt(w, recvShift)); d != 0 {
				m.adj[g] += d
			}
		}
	}
	m.dropHeld(c)
	c.alive = false
	m.refreshAlive()
	unix.Munmap(c.meta)
	c.meta, c.metas, c.hdr = nil, nil, nil
	for _, idx := range append([]uint32(nil), c.owned...) {
		c.bufs[idx].state = bufOrphan
	}
	m.reapOrphans(c)
	m.opt.Logf("cbuf: component %d %q left; %d buffers still held elsewhere", c.slot, c.name, len(c.owned))
	m.poke()
}

func (m *Manager) reapOrphans(c *component) {
	for _, idx := range append([]uint32(nil), c.owned...) {
		g := m.g(c.slot, idx)
		if !m.live(g) {
			m.resetCounts(g)
			m.destroy(c, idx)
		}
	}
	if len(c.owned) == 0 {
		m.release(c)
		m.comps[c.slot] = nil
	}
}

func (m *Manager) release(c *component) {
	if c.meta != nil {
		unix.Munmap(c.meta)
		c.meta = nil
	}
	if c.metaFd >= 0 {
		unix.Close(c.metaFd)
		c.metaFd = -1
	}
	if c.poolFd >= 0 {
		unix.Close(c.poolFd)
		c.poolFd = -1
	}
	for idx, fd := range c.bfd {
		unix.Close(fd)
		delete(c.bfd, idx)
	}
}

// Audit counts the buffers that are live (referenced somewhere, or sent and
// not yet received) among all that exist.
func (m *Manager) Audit() (live, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.comps {
		if c == nil {
			continue
		}
		for _, idx := range c.owned {
			total++
			if m.live(m.g(c.slot, idx)) {
				live++
			}
		}
	}
	return live, total
}
