package cbuf

// The extent allocator: each component's pool memfd is carved into
// page extents, one per buffer, charged to the component's quota.

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"
)

func (c *component) allocExtent(n uint32, limit uint32) (uint32, bool) {
	for i, e := range c.free {
		if e.n >= n {
			off := e.off
			if e.n == n {
				c.free = append(c.free[:i], c.free[i+1:]...)
			} else {
				c.free[i] = extent{e.off + n, e.n - n}
			}
			return off, true
		}
	}
	if c.bump+n <= limit {
		c.bump += n
		return c.bump - n, true
	}
	return 0, false
}

func (c *component) freeExtent(off, n uint32) {
	i := sort.Search(len(c.free), func(i int) bool { return c.free[i].off > off })
	c.free = append(c.free, extent{})
	copy(c.free[i+1:], c.free[i:])
	c.free[i] = extent{off, n}
	// merge neighbours
	out := c.free[:0]
	for _, e := range c.free {
		if len(out) > 0 && out[len(out)-1].off+out[len(out)-1].n == e.off {
			out[len(out)-1].n += e.n
			continue
		}
		out = append(out, e)
	}
	c.free = out
	if len(c.free) > 0 && c.free[len(c.free)-1].off+c.free[len(c.free)-1].n == c.bump {
		c.bump = c.free[len(c.free)-1].off
		c.free = c.free[:len(c.free)-1]
	}
}

// create makes a buffer of npages in c's pool, charged to its quota.
func (m *Manager) create(c *component, npages uint32) (uint32, bool) {
	if c.used+uint64(npages) > c.quota {
		return 0, false
	}
	var idx uint32
	if n := len(c.freeIdx); n > 0 {
		idx = c.freeIdx[n-1]
		c.freeIdx = c.freeIdx[:n-1]
	} else if c.nextIdx < m.maxBufs {
		idx = c.nextIdx
		c.nextIdx++
	} else {
		return 0, false
	}
	off, ok := c.allocExtent(npages, uint32(m.opt.Memory/PageSize))
	if !ok {
		c.freeIdx = append(c.freeIdx, idx)
		return 0, false
	}
	if c.exporting {
		fd, err := sealedMemfd(fmt.Sprintf("buf%d.%d", c.slot, idx), uint64(npages)*PageSize)
		if err != nil {
			c.freeExtent(off, npages)
			c.freeIdx = append(c.freeIdx, idx)
			return 0, false
		}
		c.bfd[idx] = fd
	}
	g := m.g(c.slot, idx)
	d := loadDir(&m.dir[g])
	if d.Gen == 0 {
		d.Gen = 1 // no valid id is 0, so 0 can mean "none"
	}
	m.setDir(g, Dir{PageOff: off, NPages: uint16(npages), Gen: d.Gen})
	c.bufs[idx] = buffer{pageOff: off, npages: uint16(npages), state: bufClient}
	c.owned = append(c.owned, idx)
	c.used += uint64(npages)
	c.created++
	return idx, true
}

// destroy returns a buffer's pages (punching them out of the memfd),
// invalidates its id and frees its index.
func (m *Manager) destroy(c *component, idx uint32) {
	b := &c.bufs[idx]
	g := m.g(c.slot, idx)
	d := loadDir(&m.dir[g])
	gen := d.Gen + 1
	if gen == 0 {
		gen = 1
	}
	m.dropGrants(g)
	m.setDir(g, Dir{Gen: gen})
	if fd, ok := c.bfd[idx]; ok {
		unix.Close(fd) // holders keep their mappings of it; the index's next buffer is a new memfd
		delete(c.bfd, idx)
	} else {
		unix.Fallocate(c.poolFd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(b.pageOff)*PageSize, int64(b.npages)*PageSize)
	}
	if b.xuid && c.metas != nil {
		clearFlag(&c.metas[g].Cnt, FlagGranted)
	}
	b.xuid = false
	c.freeExtent(b.pageOff, uint32(b.npages))
	c.used -= uint64(b.npages)
	c.reclaimed++
	m.dropIdx(c, idx)
}

func (m *Manager) dropIdx(c *component, idx uint32) {
	c.bufs[idx] = buffer{}
	for i, x := range c.owned {
		if x == idx {
			c.owned[i] = c.owned[len(c.owned)-1]
			c.owned = c.owned[:len(c.owned)-1]
			break
		}
	}
	c.freeIdx = append(c.freeIdx, idx)
}
