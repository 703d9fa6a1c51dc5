package loadgen

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
)

type opKind uint8

const (
	opGet opKind = iota
	opSet
)

type slotState uint8

const (
	slotFree    slotState = iota
	slotWaiting           // sent, waiting for its reply
	slotResend            // Preload: to be sent again
)

// slot is one request of a worker's window and the buffer it is built in.
type slot struct {
	buf   []byte // the request datagram, frame header first
	sent  int64  // mono time of the last send
	key   uint32
	ver   uint32 // SET: the version written; GET: the version acked when sent
	id    uint16
	op    opKind
	state slotState
	tries uint8
}

// counters are one worker's share of a Result.
type counters struct {
	sent, gets, sets, hits, misses, lost, late uint64
	wrong, stale, errors, unexpected           uint64
}

type quarEntry struct {
	id    uint16
	until int64
}

// worker drives one socket. Everything in it belongs to its goroutine
// during a phase, except done, which Progress reads.
type worker struct {
	c    *Client
	idx  int
	conn *net.UDPConn
	pc   *ipv4.PacketConn
	rng  rand.PCG

	timeout int64 // ns
	tick    int64 // ns between read-deadline refreshes and expiry scans

	slots    []slot
	free     []uint16 // free slot indices
	resend   []uint16 // Preload slots to send again
	sendq    []uint16 // slots to send in the next flush
	inflight int      // slots not free

	// pending maps a request id to its slot index + 1 (0: no request).
	pending [1 << 16]uint16
	nextID  uint16
	// Ids of requests retired as lost are not reused for a while, so a
	// late reply is recognised as late instead of answering a new request.
	quar     [1 << 16 / 64]uint64
	quarQ    []quarEntry
	quarHead int

	smsgs []ipv4.Message
	rmsgs []ipv4.Message

	deadline int64 // mono time the socket's read deadline is at
	nextScan int64

	// Per phase.
	st        counters
	hist      histogram
	lastReply int64
	issued    uint64
	budget    uint64 // requests to issue; 0: no limit
	preNext   int    // Preload: next key number
	failed    uint64 // Preload: keys given up on
	idle      bool   // no requests for this worker in this phase
	done      atomic.Uint64
}

func newWorker(c *Client, idx int, conn *net.UDPConn, maxSize int) *worker {
	cfg := &c.cfg
	w := &worker{c: c, idx: idx, conn: conn, pc: ipv4.NewPacketConn(conn)}
	w.rng.Seed(cfg.Seed, uint64(idx)+0x776f726b)
	w.timeout = int64(cfg.Timeout)
	w.tick = min(max(w.timeout/4, int64(time.Millisecond)), int64(50*time.Millisecond))

	w.slots = make([]slot, cfg.Depth)
	reqLen := max(maxSetLen(maxSize), frameLen+len("get ")+KeyLen+2)
	backing := make([]byte, cfg.Depth*reqLen)
	for i := range w.slots {
		w.slots[i].buf = backing[i*reqLen : i*reqLen : (i+1)*reqLen]
	}
	w.free = make([]uint16, 0, cfg.Depth)
	w.resend = make([]uint16, 0, cfg.Depth)
	w.sendq = make([]uint16, 0, cfg.Depth)

	w.smsgs = make([]ipv4.Message, cfg.Batch)
	for i := range w.smsgs {
		w.smsgs[i].Buffers = make([][]byte, 1)
	}
	// A reply holds at most the largest value plus its framing; servers
	// that split replies send datagrams of about 1400 bytes.
	rlen := max(2048, maxSize+256)
	rbacking := make([]byte, cfg.Batch*rlen)
	w.rmsgs = make([]ipv4.Message, cfg.Batch)
	for i := range w.rmsgs {
		w.rmsgs[i].Buffers = [][]byte{rbacking[i*rlen : (i+1)*rlen : (i+1)*rlen]}
	}
	w.nextID = uint16(w.rng.Uint64())
	return w
}

// reset prepares the worker for a phase.
func (w *worker) reset(p *phase, budget uint64) {
	w.st = counters{}
	w.hist.reset()
	w.lastReply = 0
	w.issued = 0
	w.budget = budget
	w.preNext = w.idx
	w.failed = 0
	w.idle = false
	w.done.Store(0)
	w.deadline = 0 // the previous phase may have moved it
	w.nextScan = 0
	w.free = w.free[:0]
	for i := len(w.slots) - 1; i >= 0; i-- {
		w.slots[i].state = slotFree
		w.free = append(w.free, uint16(i))
	}
	w.resend = w.resend[:0]
	w.sendq = w.sendq[:0]
	w.inflight = 0
}

// loop runs the worker's closed loop until the phase is done.
func (w *worker) loop(p *phase) error {
	for {
		stopping := p.stop.Load()
		if !stopping {
			if err := w.issue(p); err != nil {
				return err
			}
		} else {
			// Preload SETs waiting to be sent again are given up.
			for _, si := range w.resend {
				w.release(si)
			}
			w.resend = w.resend[:0]
		}
		if w.inflight == 0 {
			if stopping || w.exhausted(p) {
				return nil
			}
			// Work is left but nothing could be sent: every send
			// failed. Do not spin.
			time.Sleep(time.Millisecond)
			continue
		}
		if err := w.receive(p); err != nil {
			return err
		}
		w.expire(p, mono())
	}
}

// exhausted tells whether the phase has nothing more for this worker to
// issue.
func (w *worker) exhausted(p *phase) bool {
	if p.preload {
		return w.preNext >= w.c.cfg.Keys && len(w.resend) == 0
	}
	return w.budget != 0 && w.issued >= w.budget
}

// issue fills the window and sends the new requests.
func (w *worker) issue(p *phase) error {
	for _, si := range w.resend {
		s := &w.slots[si]
		s.tries++
		w.enqueue(si)
	}
	w.resend = w.resend[:0]
	for len(w.free) > 0 {
		si := w.free[len(w.free)-1]
		if !w.prepare(p, &w.slots[si]) {
			break
		}
		w.free = w.free[:len(w.free)-1]
		w.inflight++
		w.enqueue(si)
	}
	return w.flush(p)
}

// prepare builds the next request of the phase in s.
func (w *worker) prepare(p *phase, s *slot) bool {
	c := w.c
	var key int
	if p.preload {
		if w.preNext >= c.cfg.Keys {
			return false
		}
		key = w.preNext
		w.preNext += len(c.workers)
		w.buildSet(s, key, c.ks.issued[key].Add(1))
		s.tries = 1
		return true
	}
	if w.budget != 0 && w.issued >= w.budget {
		return false
	}
	w.issued++
	key = c.pickKey(&w.rng)
	// One SET per key in flight at a time, so that versions reach the
	// server in the order they are numbered (see the package doc).
	if p.getRatio < 1 && uniform(&w.rng) >= p.getRatio && c.ks.busy[key].CompareAndSwap(0, 1) {
		w.buildSet(s, key, c.ks.issued[key].Add(1))
		return true
	}
	s.op, s.key = opGet, uint32(key)
	s.ver = c.ks.acked[key].Load()
	s.buf = appendGet(s.buf[:frameLen], c.key(key))
	return true
}

func (w *worker) buildSet(s *slot, key int, version uint32) {
	c := w.c
	size := int(c.sizes[key])
	s.op, s.key, s.ver = opSet, uint32(key), version
	b := appendSetHead(s.buf[:frameLen], c.key(key), KeyFlags(key), size)
	b = AppendValue(b, key, version, size)
	s.buf = append(b, "\r\n"...)
}

// enqueue gives slot si a fresh request id and queues it for sending.
func (w *worker) enqueue(si uint16) {
	s := &w.slots[si]
	s.id = w.newID()
	s.state = slotWaiting
	w.pending[s.id] = si + 1
	putFrame(s.buf, s.id)
	w.sendq = append(w.sendq, si)
}

// newID returns the next request id neither pending nor quarantined.
func (w *worker) newID() uint16 {
	id := w.nextID
	for range 1 << 16 {
		if w.pending[id] == 0 && !w.quarantined(id) {
			w.nextID = id + 1
			return id
		}
		id++
	}
	// Everything is quarantined (heavy loss with a tiny Timeout): reuse a
	// quarantined id rather than stall. At most Depth ids are pending.
	for w.pending[id] != 0 {
		id++
	}
	w.nextID = id + 1
	return id
}

// flush sends the queued requests, Batch datagrams per sendmmsg.
func (w *worker) flush(p *phase) error {
	q := w.sendq
	for len(q) > 0 {
		k := min(len(q), len(w.smsgs))
		now := mono()
		for i := range k {
			s := &w.slots[q[i]]
			w.smsgs[i].Buffers[0] = s.buf
			s.sent = now
		}
		n, err := w.pc.WriteBatch(w.smsgs[:k], 0)
		w.st.sent += uint64(max(n, 0))
		q = q[max(n, 0):]
		if err == nil && n > 0 {
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return err
		}
		// The first unsent datagram failed (ECONNREFUSED from an
		// earlier ICMP error, ENOBUFS...): give it up and go on.
		w.st.errors++
		if len(q) > 0 {
			w.unsent(p, q[0])
			q = q[1:]
		}
	}
	w.sendq = w.sendq[:0]
	return nil
}

// unsent takes back a request that could not be sent.
func (w *worker) unsent(p *phase, si uint16) {
	s := &w.slots[si]
	w.pending[s.id] = 0
	if p.preload {
		w.retry(si)
		return
	}
	if s.op == opSet {
		w.c.ks.busy[s.key].Store(0)
	}
	w.release(si)
}

func (w *worker) release(si uint16) {
	w.slots[si].state = slotFree
	w.free = append(w.free, si)
	w.inflight--
}

// retry sends a Preload SET again, or gives its key up.
func (w *worker) retry(si uint16) {
	s := &w.slots[si]
	if s.tries >= preloadTries {
		w.failed++
		w.release(si)
		return
	}
	s.state = slotResend
	w.resend = append(w.resend, si)
}

// receive waits for replies (at most tick) and handles them.
func (w *worker) receive(p *phase) error {
	now := mono()
	if w.deadline-now < w.tick/2 {
		w.deadline = now + w.tick
		if err := w.conn.SetReadDeadline(time.Now().Add(time.Duration(w.tick))); err != nil {
			return err
		}
	}
	n, err := w.pc.ReadBatch(w.rmsgs, 0)
	if n > 0 {
		now = mono()
		for i := range n {
			m := &w.rmsgs[i]
			if m.Flags&syscall.MSG_TRUNC != 0 {
				w.st.errors++ // larger than any reply we expect
				continue
			}
			w.handle(p, m.Buffers[0][:m.N], now)
		}
		w.lastReply = now
		w.done.Store(w.st.gets + w.st.sets)
	}
	switch {
	case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	case errors.Is(err, net.ErrClosed):
		return err
	case isConnRefused(err):
		// Nothing listens (yet): requests will be lost.
		w.st.errors++
		return nil
	default:
		w.st.errors++
		time.Sleep(time.Millisecond)
		return nil
	}
}

// handle matches one reply datagram to its request and checks it.
func (w *worker) handle(p *phase, b []byte, now int64) {
	if len(b) < frameLen {
		w.st.errors++
		w.st.unexpected++
		return
	}
	id := binary.BigEndian.Uint16(b[0:])
	si := w.pending[id]
	if si == 0 {
		if w.quarantined(id) {
			w.st.late++
		} else {
			w.st.errors++
			w.st.unexpected++
		}
		return
	}
	si--
	s := &w.slots[si]
	w.pending[id] = 0
	w.hist.record(now - s.sent)
	seq, total := binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint16(b[4:])
	body := b[frameLen:]
	multi := seq != 0 || total != 1
	if multi {
		// The rest of a reply spread over datagrams will come as
		// late replies to this id.
		w.quarantine(id, now)
	}
	key := int(s.key)
	c := w.c
	if s.op == opSet {
		w.st.sets++
		if !multi && string(body) == string(storedMsg) {
			c.ks.ack(key, s.ver)
			if !p.preload {
				c.ks.busy[key].Store(0)
			}
			w.release(si)
			return
		}
		w.st.errors++
		if p.preload {
			w.retry(si)
			return
		}
		c.ks.busy[key].Store(0)
		w.release(si)
		return
	}

	w.st.gets++
	minVer := s.ver
	w.release(si)
	if multi {
		w.st.errors++
		return
	}
	r, flags, data := parseGetReply(body, c.key(key))
	switch r {
	case replyMiss:
		w.st.misses++
		return
	case replyBad:
		w.st.errors++
		return
	case replyOtherKey:
		w.st.hits++
		w.st.wrong++
		return
	}
	w.st.hits++
	ver, err := CheckValue(data, key, int(c.sizes[key]))
	if err != nil || flags != KeyFlags(key) {
		w.st.wrong++
		return
	}
	if issued := c.ks.issued[key].Load(); issued != 0 && ver > issued {
		w.st.wrong++ // a version nobody wrote
		return
	}
	if ver < minVer && !c.ks.wasLost(key, ver) {
		w.st.stale++
	}
}

// expire retires requests that have waited longer than Timeout.
func (w *worker) expire(p *phase, now int64) {
	if now < w.nextScan {
		return
	}
	w.nextScan = now + w.tick
	for w.quarHead < len(w.quarQ) && w.quarQ[w.quarHead].until <= now {
		id := w.quarQ[w.quarHead].id
		w.quar[id/64] &^= 1 << (id % 64)
		w.quarHead++
	}
	if w.quarHead == len(w.quarQ) || w.quarHead > len(w.quarQ)/2 {
		w.quarQ = w.quarQ[:copy(w.quarQ, w.quarQ[w.quarHead:])]
		w.quarHead = 0
	}
	for i := range w.slots {
		s := &w.slots[i]
		if s.state != slotWaiting || now-s.sent < w.timeout {
			continue
		}
		w.st.lost++
		w.retire(p, uint16(i), now)
	}
}

// retire gives up waiting for slot si's reply.
func (w *worker) retire(p *phase, si uint16, now int64) {
	s := &w.slots[si]
	w.pending[s.id] = 0
	w.quarantine(s.id, now)
	if p.preload {
		w.retry(si)
		return
	}
	if s.op == opSet {
		// It may still be applied later: reading it back is not stale.
		w.c.ks.noteLost(int(s.key), s.ver)
		w.c.ks.busy[s.key].Store(0)
	}
	w.release(si)
}

// quarantine keeps id from being reused for ten timeouts (at least a
// second), so that a late reply is counted as late.
func (w *worker) quarantine(id uint16, now int64) {
	if w.quarantined(id) {
		return
	}
	w.quar[id/64] |= 1 << (id % 64)
	w.quarQ = append(w.quarQ, quarEntry{id: id, until: now + max(10*w.timeout, int64(time.Second))})
}

func (w *worker) quarantined(id uint16) bool { return w.quar[id/64]&(1<<(id%64)) != 0 }
