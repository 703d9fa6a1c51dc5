package cbuf

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Client is a component's connection: the Go twin of libcbuf, on the same
// shared layout. Alloc, Free, Send and Buf of a mapped pool are plain
// atomics on shared memory.
type Client struct {
	conn    *net.UnixConn
	slot    uint32
	maxBufs uint32
	poolLen uint64
	metaMem []byte
	hdr     *Hdr
	metas   []Meta
	dirMem  []byte
	dir     []Dir
	pools   [MaxComponents]atomic.Pointer[[]byte]
	slow    sync.Mutex

	token     Token
	exporting atomic.Bool
	owngen    []atomic.Uint32                       // exporting: generation mapped at each own index
	xb        [MaxComponents]atomic.Pointer[[]xent] // pools mapped one buffer at a time
	xmode     [MaxComponents]atomic.Bool            // that slot's pool is mapped buffer by buffer
	mapEpoch  [MaxComponents]atomic.Uint32          // Hdr.SlotEpoch when pools/xb were filled
}

// xent is one buffer of a pool mapped buffer by buffer.
type xent struct {
	b   atomic.Pointer[[]byte]
	gen atomic.Uint32 // of the buffer b maps; 0: none
}

// ClientOptions describe a component to the policy.
type ClientOptions struct {
	Name         string
	Priority     int
	QosTargetPct float64
}

// Connect joins the manager at path; options come from CBUF_NAME,
// CBUF_PRIORITY and CBUF_QOS like the C library.
func Connect(path string) (*Client, error) {
	o := ClientOptions{Name: os.Getenv("CBUF_NAME")}
	o.Priority, _ = strconv.Atoi(os.Getenv("CBUF_PRIORITY"))
	o.QosTargetPct, _ = strconv.ParseFloat(os.Getenv("CBUF_QOS"), 64)
	return ConnectWith(path, o)
}

// ConnectWith joins the manager with explicit options.
func ConnectWith(path string, o ClientOptions) (*Client, error) {
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("cbuf: connect to manager at %s: %w", path, err)
	}
	c := &Client{conn: conn}
	q := msg{Op: opHello, Arg: uint32(o.Priority), Arg2: uint64(o.QosTargetPct * 1e4)}
	copy(q.Name[:len(q.Name)-1], o.Name)
	r, fds, err := c.xchg(q, 3)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.slot, c.token = r.Arg, Token(r.Arg2)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var h0 Hdr
	if _, err := unix.Pread(fds[0], (*[unsafe.Sizeof(Hdr{})]byte)(unsafe.Pointer(&h0))[:], 0); err != nil || h0.Magic != Magic || h0.Version != Version {
		conn.Close()
		return nil, errors.New("cbuf: manager sent a metadata region this client does not understand")
	}
	c.maxBufs, c.poolLen = h0.MaxBufs, h0.PoolBytes
	if c.metaMem, err = mapShared(fds[0], metaBytes(c.maxBufs), true); err == nil {
		var pool []byte
		if pool, err = mapShared(fds[1], c.poolLen, true); err == nil {
			c.pools[c.slot].Store(&pool)
			c.dirMem, err = mapShared(fds[2], dirBytes(c.maxBufs), false)
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.hdr = hdrOf(c.metaMem)
	c.metas = metasOf(c.metaMem, h0.MetaOff, c.maxBufs)
	c.dir = dirsOf(c.dirMem, c.maxBufs)
	c.mapEpoch[c.slot].Store(atomic.LoadUint32(&c.hdr.SlotEpoch[c.slot]))
	return c, nil
}

// Slot is this component's number at the manager.
func (c *Client) Slot() uint32 { return c.slot }

// Token names this component to another that grants it buffers
// (cbuf_self): pass it to the sender like an id.
func (c *Client) Token() Token { return c.token }

// Export gives each of this component's buffers its own memfd, so that
// Grant can share one buffer with a component of another uid. Call it
// before the first Alloc. Components of this uid still read every buffer.
func (c *Client) Export() error {
	c.slow.Lock()
	defer c.slow.Unlock()
	if _, _, err := c.xchg(msg{Op: opExport}, 0); err != nil {
		return err
	}
	c.owngen = make([]atomic.Uint32, c.maxBufs)
	c.exporting.Store(true)
	return nil
}

// Grant lets the component named by peer read buffer id, read-only, even
// when it runs as another uid (the owner must have called Export). The
// caller must be able to read id itself. Count the send as usual (Send),
// or use SendTo, which does both.
func (c *Client) Grant(id ID, peer Token) error {
	q := msg{Op: opGrant, Arg2: uint64(id)}
	binary.LittleEndian.PutUint64(q.Name[:8], uint64(peer))
	c.slow.Lock()
	defer c.slow.Unlock()
	_, _, err := c.xchg(q, 0)
	return err
}

// SendTo is Grant followed by Send.
func (c *Client) SendTo(id ID, peer Token) error {
	if err := c.Grant(id, peer); err != nil {
		return err
	}
	c.Send(id)
	return nil
}

// mapOwn maps an exporting owner's buffer at its place in its own pool the
// first time this generation of it is allocated.
func (c *Client) mapOwn(idx uint32, d Dir) error {
	if c.owngen[idx].Load() == uint32(d.Gen) {
		return nil
	}
	c.slow.Lock()
	defer c.slow.Unlock()
	_, fds, err := c.xchg(msg{Op: opBufFd, Arg: idx, Arg2: uint64(d.Gen)}, 1)
	if err != nil {
		return err
	}
	defer unix.Close(fds[0])
	pool := *c.pools[c.slot].Load()
	off := uint64(d.PageOff) * PageSize
	if _, err := unix.MmapPtr(fds[0], 0, unsafe.Pointer(&pool[off]), uintptr(d.NPages)*PageSize,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		return fmt.Errorf("cbuf: map own buffer: %w", err)
	}
	c.owngen[idx].Store(uint32(d.Gen))
	return nil
}

// Close disconnects; the manager drops this component's references.
func (c *Client) Close() {
	if c.conn != nil {
		c.conn.Close()
	}
	for i := range c.pools {
		if p := c.pools[i].Swap(nil); p != nil {
			unix.Munmap(*p)
		}
	}
	if c.metaMem != nil {
		unix.Munmap(c.metaMem)
	}
	if c.dirMem != nil {
		unix.Munmap(c.dirMem)
	}
	for i := range c.xb {
		if x := c.xb[i].Swap(nil); x != nil {
			for j := range *x {
				if b := (*x)[j].b.Swap(nil); b != nil {
					unix.Munmap(*b)
				}
			}
		}
	}
	c.metaMem, c.dirMem, c.hdr, c.metas, c.dir = nil, nil, nil, nil, nil
}

func (c *Client) xchg(q msg, nfds int) (reply, []int, error) {
	b := make([]byte, unsafe.Sizeof(msg{}))
	binary.LittleEndian.PutUint32(b[0:], q.Op)
	binary.LittleEndian.PutUint32(b[4:], q.Arg)
	binary.LittleEndian.PutUint64(b[8:], q.Arg2)
	copy(b[16:], q.Name[:])
	if _, err := c.conn.Write(b); err != nil {
		return reply{}, nil, fmt.Errorf("cbuf: manager: %w", err)
	}
	rb := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.conn.ReadMsgUnix(rb, oob)
	if err != nil || n < 16 {
		return reply{}, nil, fmt.Errorf("cbuf: manager closed the connection: %v", err)
	}
	r := reply{Status: int32(binary.LittleEndian.Uint32(rb)), Arg: binary.LittleEndian.Uint32(rb[4:]), Arg2: binary.LittleEndian.Uint64(rb[8:])}
	var fds []int
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			f, _ := unix.ParseUnixRights(&m)
			fds = append(fds, f...)
		}
	}
	if r.Status != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return r, nil, fmt.Errorf("cbuf: manager refused: %w", unix.Errno(-r.Status))
	}
	if len(fds) != nfds {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return r, nil, fmt.Errorf("cbuf: manager sent %d descriptors, want %d", len(fds), nfds)
	}
	return r, fds, nil
}

func (c *Client) g(slot, idx uint32) uint64 { return uint64(slot)*uint64(c.maxBufs) + uint64(idx) }

func (c *Client) pushFree(idx uint32, k int) {
	head := &c.hdr.FreeHeads[k]
	m := &c.metas[c.g(c.slot, idx)]
	for {
		h := atomic.LoadUint64(head)
		top := uint32(h)
		if top == 0 {
			top = nextEnd
		}
		atomic.StoreUint32(&m.Next, top)
		if atomic.CompareAndSwapUint64(head, h, (h>>32+1)<<32|uint64(idx+1)) {
			return
		}
	}
}

func (c *Client) popFree(k int) (uint32, bool) {
	head := &c.hdr.FreeHeads[k]
	for {
		h := atomic.LoadUint64(head)
		top := uint32(h)
		if top == 0 {
			return 0, false
		}
		if top > c.maxBufs {
			atomic.StoreUint64(head, (h>>32+1)<<32)
			return 0, false
		}
		nx := atomic.LoadUint32(&c.metas[c.g(c.slot, top-1)].Next)
		if nx == nextEnd || nx > c.maxBufs {
			nx = 0
		}
		if atomic.CompareAndSwapUint64(head, h, (h>>32+1)<<32|uint64(nx)) {
			return top - 1, true
		}
	}
}

func (c *Client) drainRing() {
	head := atomic.LoadUint32(&c.hdr.RingHead)
	tail := c.hdr.RingTail
	for ; tail != head; tail++ {
		idx := c.hdr.Ring[tail&(RingSize-1)]
		if idx >= c.maxBufs {
			continue
		}
		d := loadDir(&c.dir[c.g(c.slot, idx)])
		if d.NPages == 0 || d.NPages > MaxPages {
			continue
		}
		c.pushFree(idx, sizeClass(int(d.NPages)*PageSize))
	}
	atomic.StoreUint32(&c.hdr.RingTail, tail)
}

func (c *Client) collect(k int) error {
	t0 := time.Now()
	c.slow.Lock()
	_, _, err := c.xchg(msg{Op: opCollect, Arg: uint32(k)}, 0)
	if err == nil {
		c.drainRing()
	}
	c.slow.Unlock()
	atomic.AddUint64(&c.hdr.BlockedNs, uint64(time.Since(t0)))
	atomic.AddUint64(&c.hdr.Collects, 1)
	return err
}

// ErrSize is returned for sizes of 0 or above 64 pages.
var ErrSize = fmt.Errorf("cbuf: size must be 1..%d bytes", MaxPages*PageSize)

// Alloc returns a writable buffer of at least size bytes and its id.
func (c *Client) Alloc(size int) ([]byte, ID, error) {
	if size <= 0 || size > MaxPages*PageSize {
		return nil, 0, ErrSize
	}
	k := sizeClass(size)
	for {
		idx, ok := c.popFree(k)
		if !ok {
			if c.slow.TryLock() {
				c.drainRing()
				c.slow.Unlock()
				idx, ok = c.popFree(k)
			}
			if !ok {
				if err := c.collect(k); err != nil {
					return nil, 0, err
				}
				continue
			}
		}
		g := c.g(c.slot, idx)
		atomic.StoreUint32(&c.metas[g].Next, 0)
		w := atomic.AddUint64(&c.metas[g].Cnt, ref1) - ref1
		if w&FlagInconsistent != 0 {
			atomic.AddUint64(&c.metas[g].Cnt, ^(ref1|FlagInconsistent)+1)
			continue
		}
		d := loadDir(&c.dir[g])
		if c.exporting.Load() {
			if err := c.mapOwn(idx, d); err != nil {
				atomic.AddUint64(&c.metas[g].Cnt, ^ref1+1)
				c.pushFree(idx, k)
				return nil, 0, err
			}
		}
		atomic.AddUint64(&c.hdr.Allocs, 1)
		pool := *c.pools[c.slot].Load()
		off := uint64(d.PageOff) * PageSize
		return pool[off : off+uint64(d.NPages)*PageSize : off+uint64(d.NPages)*PageSize], makeID(d.Gen, c.slot, idx), nil
	}
}

func (c *Client) metaOf(id ID) (*Meta, Dir, bool) {
	slot, idx := id.Slot(), id.Index()
	if c.hdr == nil || slot >= MaxComponents || idx >= c.maxBufs {
		return nil, Dir{}, false
	}
	g := c.g(slot, idx)
	d := loadDir(&c.dir[g])
	if d.NPages == 0 || d.Gen != id.Gen() {
		return nil, Dir{}, false
	}
	return &c.metas[g], d, true
}

// Free drops one reference.
func (c *Client) Free(id ID) {
	m, d, ok := c.metaOf(id)
	if !ok {
		return
	}
	w := atomic.AddUint64(&m.Cnt, ^ref1+1) + ref1
	if cnt(w, refShift) == 0 {
		atomic.AddUint64(&m.Cnt, ref1) // double free: undo
		return
	}
	atomic.AddUint64(&c.hdr.Frees, 1)
	if cnt(w, refShift) != 1 {
		return
	}
	if id.Slot() == c.slot && cnt(w, sentShift) == 0 && cnt(w, recvShift) == 0 && w&(FlagRelinquish|FlagInconsistent) == 0 {
		c.pushFree(id.Index(), sizeClass(int(d.NPages)*PageSize))
		return
	}
	if w&FlagRelinquish != 0 {
		b := make([]byte, unsafe.Sizeof(msg{}))
		binary.LittleEndian.PutUint32(b, opRelinquish)
		binary.LittleEndian.PutUint64(b[8:], uint64(id))
		// a note, not a request: never block the free on the socket
		if rc, err := c.conn.SyscallConn(); err == nil {
			rc.Write(func(fd uintptr) bool {
				unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, nil)
				return true
			})
		}
	}
}

// Send counts a send; call it before passing id to another component.
func (c *Client) Send(id ID) {
	if m, _, ok := c.metaOf(id); ok {
		atomic.AddUint64(&m.Cnt, sent1)
		atomic.AddUint64(&c.hdr.Sends, 1)
	}
}

// bytesOf is where buffer id (described by d) is mapped here: in its
// owner's pool, or, for a pool mapped buffer by buffer, in its own mapping,
// asked from the manager the first time.
func (c *Client) bytesOf(id ID, d Dir) []byte {
	slot := id.Slot()
	if atomic.LoadUint32(&c.hdr.SlotEpoch[slot]) != c.mapEpoch[slot].Load() {
		c.pool(slot) // drops what was mapped for the slot's former component
	}
	if p := c.pools[slot].Load(); p != nil {
		off := uint64(d.PageOff) * PageSize
		return (*p)[off : off+uint64(d.NPages)*PageSize]
	}
	if x := c.xb[slot].Load(); x != nil && c.xmode[slot].Load() {
		e := &(*x)[id.Index()]
		if e.gen.Load() == uint32(d.Gen) {
			if b := e.b.Load(); b != nil {
				return *b
			}
		}
	}
	if c.pool(slot) != nil {
		return c.bytesOf(id, d)
	}
	x := c.xb[slot].Load()
	if x == nil || !c.xmode[slot].Load() {
		return nil
	}
	c.slow.Lock()
	defer c.slow.Unlock()
	e := &(*x)[id.Index()]
	if e.gen.Load() == uint32(d.Gen) {
		return *e.b.Load()
	}
	r, fds, err := c.xchg(msg{Op: opMapBuf, Arg2: uint64(id)}, 1)
	if err != nil {
		return nil
	}
	b, err := mapShared(fds[0], r.Arg2, false)
	unix.Close(fds[0])
	if err != nil {
		return nil
	}
	// the old generation at this index is dead everywhere: nobody reads it
	e.gen.Store(0)
	if old := e.b.Swap(&b); old != nil {
		unix.Munmap(*old)
	}
	e.gen.Store(uint32(d.Gen))
	return b
}

// pool maps another component's whole pool (same uid), or returns nil and
// marks the slot as mapped buffer by buffer when the manager says so.
func (c *Client) pool(slot uint32) []byte {
	if p := c.pools[slot].Load(); p != nil && atomic.LoadUint32(&c.hdr.SlotEpoch[slot]) == c.mapEpoch[slot].Load() {
		return *p
	}
	c.slow.Lock()
	defer c.slow.Unlock()
	if ep := atomic.LoadUint32(&c.hdr.SlotEpoch[slot]); slot != c.slot && c.mapEpoch[slot].Load() != ep {
		// a new component in the slot: every buffer of the former one is
		// dead (a slot is reused only then)
		if p := c.pools[slot].Swap(nil); p != nil {
			unix.Munmap(*p)
		}
		if x := c.xb[slot].Load(); x != nil {
			for i := range *x {
				(*x)[i].gen.Store(0)
				if b := (*x)[i].b.Swap(nil); b != nil {
					unix.Munmap(*b)
				}
			}
		}
		c.xmode[slot].Store(false)
		c.mapEpoch[slot].Store(ep)
	}
	if p := c.pools[slot].Load(); p != nil {
		return *p
	}
	if c.xmode[slot].Load() {
		return nil
	}
	r, fds, err := c.xchg(msg{Op: opMap, Arg: slot}, 1)
	if errors.Is(err, mapPerBuffer) {
		if c.xb[slot].Load() == nil {
			x := make([]xent, c.maxBufs)
			c.xb[slot].Store(&x)
		}
		c.xmode[slot].Store(true)
		return nil
	}
	if err != nil {
		return nil
	}
	size := c.poolLen
	if r.Arg2 != 0 { // the kernel's pool is smaller
		size = r.Arg2
	}
	b, err := mapShared(fds[0], size, false)
	unix.Close(fds[0])
	if err != nil {
		return nil
	}
	c.pools[slot].Store(&b)
	return b
}

// ErrBadBuf is returned by Buf for unknown or stale ids and oversized claims.
var ErrBadBuf = errors.New("cbuf: no such buffer, or it is smaller than the size claimed")

// Buf takes a reference on a received id and returns its first size bytes.
// Another component's buffer is mapped read-only: writing it faults.
func (c *Client) Buf(id ID, size int) ([]byte, error) {
	m, d, ok := c.metaOf(id)
	if !ok || size <= 0 || size > int(d.NPages)*PageSize {
		return nil, ErrBadBuf
	}
	b := c.bytesOf(id, d)
	if b == nil {
		return nil, ErrBadBuf
	}
	atomic.AddUint64(&m.Cnt, ref1|recv1)
	if d2 := loadDir(&c.dir[c.g(id.Slot(), id.Index())]); d2 != d {
		atomic.AddUint64(&m.Cnt, ^(ref1|recv1)+1)
		return nil, ErrBadBuf
	}
	atomic.AddUint64(&c.hdr.Recvs, 1)
	return b[:size:size], nil
}

// peek is Buf without counting, for a buffer the caller already holds.
func (c *Client) peek(id ID) []byte {
	_, d, ok := c.metaOf(id)
	if !ok {
		return nil
	}
	return c.bytesOf(id, d)
}

// KernelRecv waits up to timeout for the next buffer the kernel component
// sent (manager run with --kernel); take it with Buf like any received id.
func (c *Client) KernelRecv(timeout time.Duration) (ID, error) {
	c.slow.Lock()
	defer c.slow.Unlock()
	r, _, err := c.xchg(msg{Op: opKRecv, Arg: uint32(timeout / time.Millisecond)}, 0)
	if err != nil {
		return 0, err
	}
	return ID(r.Arg2), nil
}

// Size is a buffer's size in bytes, 0 if unknown.
func (c *Client) Size(id ID) int {
	if _, d, ok := c.metaOf(id); ok {
		return int(d.NPages) * PageSize
	}
	return 0
}

// QueryStats asks the manager at path for its statistics.
func QueryStats(path string) (Stats, error) {
	var s Stats
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return s, fmt.Errorf("no CBUF manager at %s (start one with `cistern cbuf manager --socket %s`): %w", path, path, err)
	}
	defer conn.Close()
	b := make([]byte, unsafe.Sizeof(msg{}))
	binary.LittleEndian.PutUint32(b, opStats)
	if _, err := conn.Write(b); err != nil {
		return s, err
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	rb := make([]byte, 1<<20)
	n, err := conn.Read(rb)
	if err != nil || n < 16 {
		return s, fmt.Errorf("cbuf stats: no answer from the manager: %v", err)
	}
	l := int(binary.LittleEndian.Uint32(rb[4:]))
	if 16+l > n {
		return s, errors.New("cbuf stats: truncated answer")
	}
	return s, json.Unmarshal(rb[16:16+l], &s)
}
