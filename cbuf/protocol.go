package cbuf

// The socket protocol: one goroutine per connection reads fixed-size
// requests (layout.go) and answers each with a reply and any descriptors.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

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
