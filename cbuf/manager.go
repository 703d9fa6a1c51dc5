package cbuf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ManagerOptions configure a manager.
type ManagerOptions struct {
	Socket   string        // Unix socket path
	Memory   uint64        // bytes all pools together may hold (default 64 MiB)
	Pool     uint64        // first quota of each component (default Memory/8)
	Policy   string        // max-throughput (default), priority, qos
	Interval time.Duration // policy period (default 250 ms: 4 Hz)
	// Who may connect: the socket is 0600 (the manager's uid only), or
	// 0660 for Group (a name or number). AllowUIDs/AllowGIDs, when set,
	// are checked at accept (SO_PEERCRED, SO_PEERGROUPS) whatever the mode.
	Group     string
	AllowUIDs []uint32
	AllowGIDs []uint32
	Logf      func(format string, a ...any)
}

// Buffer states in the manager's own records.
const (
	bufNone    = iota
	bufClient  // created and handed to its owner (free list, in use or garbage)
	bufPending // taken back with the inconsistent flag; the index waits for the owner's acknowledgement
	bufOrphan  // its owner died while another component still held it
)

type buffer struct {
	pageOff uint32
	npages  uint16
	state   uint8
	xuid    bool // granted to another uid: destroyed when dead, never recycled
}

type extent struct{ off, n uint32 }

// collectBatch is how many buffers of the asked size a collection aims to
// hand back, creating new ones within the quota when too few are dead.
const collectBatch = 256

type component struct {
	slot     uint32
	name     string
	pid      int32
	priority int
	qosPPM   uint64
	conn     *net.UnixConn
	alive    bool
	uid, gid uint32
	token    Token

	exporting              bool
	bfd                    map[uint32]int    // exporting: each buffer's own memfd
	held                   map[uint64]uint16 // grants to this component: global index -> gen
	refusedMap, refusedIDs uint64

	metaFd, poolFd int
	meta           []byte
	hdr            *Hdr
	metas          []Meta

	bufs    []buffer
	owned   []uint32 // indexes in bufClient, bufPending or bufOrphan
	freeIdx []uint32
	nextIdx uint32
	free    []extent // free page extents in the pool memfd, sorted
	bump    uint32

	quota, used uint64 // pages

	// measured by the manager
	blockedNs, collectNs       int64
	collections, collected     uint64
	created, reclaimed, blocks uint64
	blockedSince               time.Time
	pol                        policyState
}

// Manager owns the pools and answers components on a Unix socket.
type Manager struct {
	opt     ManagerOptions
	maxBufs uint32
	mu      sync.Mutex
	comps   [MaxComponents]*component
	alive   []*component // connected components, for the liveness scans
	dirFd   int
	dirMem  []byte
	dir     []Dir
	adj     map[uint64]int64 // sent - recv carried over from dead components
	wake    chan struct{}
	kern    *kernelComp
	ln      *net.UnixListener
	start   time.Time

	uids   map[uint32]*uidDir
	grants map[uint64]map[*component]bool // global index -> grantees
	mixed  bool                           // connected components of more than one uid
	epoch  [MaxComponents]uint32          // HELLOs per slot (Hdr.SlotEpoch)

	drops                                atomic.Uint64 // malformed requests
	refusedConns, refusedMap, refusedIDs atomic.Uint64
}

// NewManager creates the directory and listens on opt.Socket.
func NewManager(opt ManagerOptions) (*Manager, error) {
	if opt.Memory == 0 {
		opt.Memory = 64 << 20
	}
	if opt.Memory < 64*PageSize || opt.Memory > 1<<36 {
		return nil, fmt.Errorf("--memory must be between 256KiB and 64GiB, got %d bytes", opt.Memory)
	}
	opt.Memory &^= PageSize - 1
	if opt.Pool == 0 {
		opt.Pool = opt.Memory / 8
	}
	if opt.Policy == "" {
		opt.Policy = "max-throughput"
	}
	if _, ok := policies[opt.Policy]; !ok {
		return nil, fmt.Errorf("unknown policy %q: use max-throughput, priority or qos", opt.Policy)
	}
	if opt.Interval == 0 {
		opt.Interval = 250 * time.Millisecond
	}
	if opt.Logf == nil {
		opt.Logf = func(string, ...any) {}
	}
	mode, gid := os.FileMode(0o600), -1
	if opt.Group != "" {
		var err error
		if gid, err = LookupGroup(opt.Group); err != nil {
			return nil, err
		}
		mode = 0o660
	}
	m := &Manager{opt: opt, maxBufs: uint32(opt.Memory / PageSize), adj: map[uint64]int64{}, wake: make(chan struct{}, 1), start: time.Now(),
		uids: map[uint32]*uidDir{}, grants: map[uint64]map[*component]bool{}}
	var err error
	if m.dirFd, err = memfd("dir", dirBytes(m.maxBufs)); err != nil {
		return nil, err
	}
	if m.dirMem, err = mapShared(m.dirFd, dirBytes(m.maxBufs), true); err != nil {
		unix.Close(m.dirFd)
		return nil, err
	}
	m.dir = dirsOf(m.dirMem, m.maxBufs)
	ln, err := listenPrivate(opt.Socket, mode, gid)
	if err != nil {
		m.closeDir()
		return nil, err
	}
	m.ln = ln
	return m, nil
}

func (m *Manager) closeDir() {
	unix.Munmap(m.dirMem)
	unix.Close(m.dirFd)
	for _, u := range m.uids {
		unix.Munmap(u.mem)
		unix.Close(u.fd)
	}
	m.uids = nil
}

// Run serves until ctx is done, then closes everything.
func (m *Manager) Run(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		m.ln.Close()
	}()
	// The policy loop reads the directory mapping: it must be gone before
	// closeDir unmaps it (a tick taken after the unmap faulted: SIGSEGV in
	// reapOrphans, seen on 6.1).
	policyDone := make(chan struct{})
	go func() { defer close(policyDone); m.policyLoop(ctx) }()
	var wg sync.WaitGroup
	for {
		c, err := m.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		p, err := peerOf(c)
		if err != nil || !m.admit(p) {
			m.refusedConns.Add(1)
			m.opt.Logf("cbuf: refusing a connection from uid %d gid %d pid %d (not in --allow-uid/--allow-group)", p.uid, p.gid, p.pid)
			c.Close()
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); m.serve(ctx, c, p) }()
	}
	m.mu.Lock()
	for _, c := range m.comps {
		if c != nil && c.conn != nil {
			c.conn.Close()
		}
	}
	m.mu.Unlock()
	wg.Wait()
	<-policyDone
	os.Remove(m.opt.Socket)
	m.mu.Lock()
	for _, c := range m.comps {
		if c != nil {
			m.release(c)
		}
	}
	m.closeDir()
	m.mu.Unlock()
	return nil
}

func (m *Manager) g(slot, idx uint32) uint64 { return uint64(slot)*uint64(m.maxBufs) + uint64(idx) }

// serve handles one connection: the first message must be HELLO.
func (m *Manager) serve(ctx context.Context, conn *net.UnixConn, p peer) {
	defer conn.Close()
	var c *component
	buf := make([]byte, unsafe.Sizeof(msg{}))
	for {
		n, err := conn.Read(buf)
		if err != nil || n == 0 {
			break
		}
		if n != len(buf) {
			m.drops.Add(1)
			continue
		}
		var q msg
		q.Op = binary.LittleEndian.Uint32(buf[0:])
		q.Arg = binary.LittleEndian.Uint32(buf[4:])
		q.Arg2 = binary.LittleEndian.Uint64(buf[8:])
		copy(q.Name[:], buf[16:])
		if c == nil && q.Op != opHello && q.Op != opStats {
			m.drops.Add(1)
			break
		}
		switch q.Op {
		case opHello:
			if c != nil {
				m.drops.Add(1)
				writeReply(conn, reply{Status: -int32(unix.EISCONN)}, nil)
				continue
			}
			var fds []int
			c, fds, err = m.hello(conn, q, p)
			if err != nil {
				m.opt.Logf("cbuf: refusing a component: %v", err)
				writeReply(conn, reply{Status: -int32(unix.ENOSPC)}, nil)
				return
			}
			err = writeReply(conn, reply{Arg: c.slot, Arg2: uint64(c.token)}, fds)
			for _, fd := range fds {
				unix.Close(fd)
			}
			if err != nil {
				break
			}
		case opCollect:
			if q.Arg >= Classes {
				m.drops.Add(1)
				writeReply(conn, reply{Status: -int32(unix.EINVAL)}, nil)
				continue
			}
			got := m.collectBlocking(ctx, c, int(q.Arg))
			st := int32(0)
			if got < 0 {
				st = -int32(unix.ECANCELED)
			}
			writeReply(conn, reply{Status: st, Arg: uint32(max(got, 0))}, nil)
		case opMap:
			fd, size, e := m.mapFd(c, q.Arg)
			if e != 0 {
				writeReply(conn, reply{Status: -int32(e)}, nil)
				continue
			}
			writeReply(conn, reply{Arg2: size}, []int{fd})
			unix.Close(fd)
		case opExport:
			writeReply(conn, reply{Status: -int32(m.export(c))}, nil)
		case opBufFd:
			fd, e := m.bufFd(c, q.Arg, uint16(q.Arg2))
			if e != 0 {
				writeReply(conn, reply{Status: -int32(e)}, nil)
				continue
			}
			writeReply(conn, reply{}, []int{fd})
			unix.Close(fd)
		case opMapBuf:
			fd, size, e := m.mapBuf(c, ID(q.Arg2))
			if e != 0 {
				writeReply(conn, reply{Status: -int32(e)}, nil)
				continue
			}
			writeReply(conn, reply{Arg2: size}, []int{fd})
			unix.Close(fd)
		case opGrant:
			t := Token(binary.LittleEndian.Uint64(q.Name[:8]))
			writeReply(conn, reply{Status: -int32(m.grant(c, ID(q.Arg2), t))}, nil)
		case opKRecv:
			id, err := m.kernelRecv(ctx, time.Duration(q.Arg)*time.Millisecond)
			if err != nil {
				writeReply(conn, reply{Status: -int32(errnoOf(err))}, nil)
				continue
			}
			writeReply(conn, reply{Arg2: uint64(id)}, nil)
		case opRelinquish:
			m.relinquished(ID(q.Arg2))
		case opStats:
			js, _ := jsonBytes(m.Stats())
			out := make([]byte, 16+len(js))
			binary.LittleEndian.PutUint32(out[4:], uint32(len(js)))
			copy(out[16:], js)
			conn.Write(out)
		default:
			m.drops.Add(1)
		}
	}
	if c != nil {
		m.disconnect(c)
	}
}

func writeReply(conn *net.UnixConn, r reply, fds []int) error {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint32(b[0:], uint32(r.Status))
	binary.LittleEndian.PutUint32(b[4:], r.Arg)
	binary.LittleEndian.PutUint64(b[8:], r.Arg2)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := conn.WriteMsgUnix(b, oob, nil)
	return err
}

func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *Manager) hello(conn *net.UnixConn, q msg, p peer) (*component, []int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	slot := -1
	for i, c := range m.comps {
		if c == nil && !(m.kern != nil && i == KernelSlot) {
			slot = i
			break
		}
	}
	if slot < 0 {
		return nil, nil, errors.New("all 64 component slots are taken")
	}
	c := &component{slot: uint32(slot), priority: int(q.Arg), qosPPM: q.Arg2, conn: conn, alive: true, metaFd: -1, poolFd: -1,
		pid: p.pid, uid: p.uid, gid: p.gid, token: newToken(uint32(slot)), held: map[uint64]uint16{}}
	c.name = cstring(q.Name[:])
	if c.name == "" {
		c.name = fmt.Sprintf("pid%d", c.pid)
	}
	var err error
	fail := func(e error) (*component, []int, error) { m.release(c); return nil, nil, e }
	if c.metaFd, err = sealedMemfd(fmt.Sprintf("meta%d", slot), metaBytes(m.maxBufs)); err != nil {
		return fail(err)
	}
	if c.poolFd, err = sealedMemfd(fmt.Sprintf("pool%d", slot), m.opt.Memory); err != nil {
		return fail(err)
	}
	if c.meta, err = mapShared(c.metaFd, metaBytes(m.maxBufs), true); err != nil {
		return fail(err)
	}
	c.hdr = hdrOf(c.meta)
	*c.hdr = Hdr{Magic: Magic, Version: Version, Slot: c.slot, MaxBufs: m.maxBufs, PoolBytes: m.opt.Memory, MetaOff: metaOff()}
	c.metas = metasOf(c.meta, metaOff(), m.maxBufs)
	c.bufs = make([]buffer, m.maxBufs)
	// The first quota comes out of what the other pools leave, and is at
	// least one largest buffer; the policy rebalances from there.
	c.quota = m.opt.Pool / PageSize
	if left := m.opt.Memory/PageSize - min(m.opt.Memory/PageSize, m.quotaTotal()); c.quota > left {
		c.quota = max(left, minPoolPages)
	}
	u, err := m.uidDirOf(c.uid)
	if err != nil {
		return fail(err)
	}
	dirRO, err := readOnlyFd(u.fd)
	if err != nil {
		return fail(err)
	}
	fds := []int{dupFd(c.metaFd), dupFd(c.poolFd), dirRO}
	if fds[0] < 0 || fds[1] < 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fail(errors.New("dup: out of file descriptors"))
	}
	m.comps[slot] = c
	m.epoch[slot]++
	c.hdr.SlotEpoch = m.epoch
	for _, o := range m.alive {
		atomic.StoreUint32(&o.hdr.SlotEpoch[slot], m.epoch[slot])
	}
	m.refreshAlive()
	m.opt.Logf("cbuf: component %d %q (pid %d uid %d gid %d) connected, pool %d pages", slot, c.name, c.pid, c.uid, c.gid, c.quota)
	return c, fds, nil
}

// dupFd copies a descriptor to send it: the manager keeps its own.
func dupFd(fd int) int {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return d
}

func (m *Manager) quotaTotal() uint64 {
	var t uint64
	for _, c := range m.comps {
		if c != nil && c.alive {
			t += c.quota
		}
	}
	return t
}

func cstring(b []byte) string {
	for i, x := range b {
		if x == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// mapFd opens a component's pool read-only for c; size is what to map
// (0: the usual pool size). Only a component of the owner's uid may map a
// pool; an exporting owner's buffers are mapped one by one (mapPerBuffer).
func (m *Manager) mapFd(c *component, slot uint32) (int, uint64, unix.Errno) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slot == KernelSlot && m.kern != nil {
		fd, err := m.kern.src.ReadOnlyFd()
		if err != nil {
			return -1, 0, unix.EIO
		}
		return fd, uint64(m.kern.src.Pages()) * PageSize, 0
	}
	if slot >= MaxComponents || m.comps[slot] == nil || m.comps[slot].poolFd < 0 {
		m.mapErr(c)
		return -1, 0, unix.ENOENT
	}
	o := m.comps[slot]
	if o.exporting && o != c {
		return -1, 0, mapPerBuffer
	}
	if o.uid != c.uid {
		m.mapErr(c)
		return -1, 0, unix.EACCES
	}
	fd, err := readOnlyFd(o.poolFd)
	if err != nil {
		return -1, 0, unix.EMFILE
	}
	return fd, 0, 0
}

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

// ---- buffers and extents ----

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

// destroy returns a buffer's pages (punching them out of the memfd) and
// invalidates its id; keepIdx leaves the index reserved (bufPending).
func (m *Manager) destroy(c *component, idx uint32, keepIdx bool) {
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
	if keepIdx {
		b.state = bufPending
		return
	}
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
		if b.state == bufPending {
			// acknowledged by the client (flag cleared, not in use): index reusable
			w := atomic.LoadUint64(&c.metas[m.g(c.slot, idx)].Cnt)
			if w&FlagInconsistent == 0 && cnt(w, refShift) == 0 {
				defer m.dropIdx(c, idx)
			}
			continue
		}
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
			defer m.destroy(c, idx, false)
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
			m.destroy(c, dead[i], false)
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
			m.destroy(c, idx, false)
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
// buffers are taken back with the inconsistent flag.
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
		p := &c.metas[g].Cnt
		w := atomic.LoadUint64(p)
		if cnt(w, refShift) != 0 {
			continue
		}
		next := atomic.LoadUint32(&c.metas[g].Next)
		if next != 0 {
			// on the free list: flag it; the client discards it when popped
			if w == 0 && atomic.CompareAndSwapUint64(p, 0, FlagInconsistent) {
				m.destroy(c, idx, true)
			}
			continue
		}
		if cnt(w, sentShift) != 0 && !m.live(g) && m.resetCounts(g) {
			m.destroy(c, idx, false)
		}
	}
	if c.used > c.quota {
		// the rest is referenced: hear from the holders as they let go
		m.askRelinquish(c)
	}
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
		if c.bufs[idx].state == bufPending {
			m.dropIdx(c, idx)
			continue
		}
		if !m.live(g) {
			m.resetCounts(g)
			m.destroy(c, idx, false)
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
			if c.bufs[idx].state == bufPending {
				continue
			}
			total++
			if m.live(m.g(c.slot, idx)) {
				live++
			}
		}
	}
	return live, total
}
