package cbuf

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Access control (docs/cbuf.md, "Threat model"). The trust boundary is the
// uid: components of one uid share whole pools as before; a component of
// another uid reads only buffers an exporting owner granted to it, each
// through its own memfd, and sees only those in its uid's directory.

// Token names a component to a granting one (cbuf_self / Client.Token): the
// slot in the low 6 bits and random bits above, so a token of a component
// that left never names the next one in its slot.
type Token uint64

// listenPrivate binds the socket in a fresh 0700 directory beside path,
// gives it its mode and group there, and renames it into place: nobody can
// connect before the mode is right, and a file planted at path is replaced,
// not followed.
func listenPrivate(path string, mode os.FileMode, gid int) (*net.UnixListener, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".cbuf-")
	if err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	s := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: s, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(e error) (*net.UnixListener, error) { ln.Close(); return nil, e }
	if gid >= 0 {
		if err := os.Lchown(s, -1, gid); err != nil {
			return fail(fmt.Errorf("socket group: %w", err))
		}
	}
	if err := os.Chmod(s, mode); err != nil {
		return fail(fmt.Errorf("socket mode: %w", err))
	}
	if err := os.Rename(s, path); err != nil {
		return fail(fmt.Errorf("socket %s: %w", path, err))
	}
	return ln, nil
}

// LookupGroup accepts a group name or number.
func LookupGroup(g string) (int, error) {
	if n, err := strconv.ParseUint(g, 10, 32); err == nil {
		return int(n), nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return -1, fmt.Errorf("group %s: %w", g, err)
	}
	n, _ := strconv.Atoi(gr.Gid)
	return n, nil
}

type peer struct {
	pid      int32
	uid, gid uint32
	groups   []uint32
}

func peerOf(conn *net.UnixConn) (peer, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var p peer
	var cerr error
	rc.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			cerr = err
			return
		}
		p.pid, p.uid, p.gid = cred.Pid, cred.Uid, cred.Gid
		// SO_PEERGROUPS: the supplementary groups at connect time
		b := make([]byte, 4*256)
		for {
			l := uint32(len(b))
			_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_PEERGROUPS,
				uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
			if e == unix.ERANGE && int(l) > len(b) {
				b = make([]byte, l)
				continue
			}
			if e == 0 {
				for i := 0; i+4 <= int(l); i += 4 {
					p.groups = append(p.groups, binary.NativeEndian.Uint32(b[i:]))
				}
			}
			break
		}
	})
	return p, cerr
}

// admit applies the allow-lists (whatever the socket's mode): the
// manager's own uid is always admitted.
func (m *Manager) admit(p peer) bool {
	if len(m.opt.AllowUIDs) == 0 && len(m.opt.AllowGIDs) == 0 {
		return true
	}
	if p.uid == uint32(os.Geteuid()) || slices.Contains(m.opt.AllowUIDs, p.uid) {
		return true
	}
	for _, g := range append([]uint32{p.gid}, p.groups...) {
		if slices.Contains(m.opt.AllowGIDs, g) {
			return true
		}
	}
	return false
}

func newToken(slot uint32) Token {
	var b [8]byte
	rand.Read(b[:])
	return Token(binary.LittleEndian.Uint64(b[:])&^63 | uint64(slot))
}

func (m *Manager) byToken(t Token) *component {
	if c := m.comps[uint64(t)&63]; c != nil && c.alive && c.token == t {
		return c
	}
	return nil
}

// uidDir is the directory one uid's components map: entries of the buffers
// of that uid's components, the kernel's, and the ones granted to a
// component of that uid.
type uidDir struct {
	fd   int
	mem  []byte
	dir  []Dir
	xref map[uint64]int // grants per global index, to components of this uid
}

func (m *Manager) uidDirOf(uid uint32) (*uidDir, error) {
	if d := m.uids[uid]; d != nil {
		return d, nil
	}
	fd, err := unix.MemfdCreate(fmt.Sprintf("cbuf-dir-%d", uid), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	size := dirBytes(m.maxBufs)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, err
	}
	mem, err := mapShared(fd, size, true)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	// after the manager's mapping: nobody can write it from now on
	if err := seal(fd, true, 0o400); err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, err
	}
	d := &uidDir{fd: fd, mem: mem, dir: dirsOf(mem, m.maxBufs), xref: map[uint64]int{}}
	if m.kern != nil {
		for i := uint32(0); i < m.kern.src.Pages(); i++ {
			g := m.g(KernelSlot, i)
			storeDir(&d.dir[g], loadDir(&m.dir[g]))
		}
	}
	m.uids[uid] = d
	return d, nil
}

// setDir writes a buffer's entry in the manager's own directory and in its
// owner's uid's (the kernel's: in every uid's).
func (m *Manager) setDir(g uint64, d Dir) {
	storeDir(&m.dir[g], d)
	slot := uint32(g / uint64(m.maxBufs))
	if slot == KernelSlot && m.kern != nil {
		for _, u := range m.uids {
			storeDir(&u.dir[g], d)
		}
		return
	}
	if c := m.comps[slot]; c != nil {
		if u := m.uids[c.uid]; u != nil {
			storeDir(&u.dir[g], d)
		}
	}
}

// export makes c's buffers one memfd each; only before its first buffer.
func (m *Manager) export(c *component) unix.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.exporting {
		return 0
	}
	if c.created > 0 {
		return unix.EBUSY
	}
	c.exporting = true
	c.bfd = map[uint32]int{}
	return 0
}

// bufferOf validates an id against the manager's records: the owner and
// its buffer, alive (or orphaned) with that generation.
func (m *Manager) bufferOf(id ID) (*component, uint64, bool) {
	slot, idx := id.Slot(), id.Index()
	if slot >= MaxComponents || idx >= m.maxBufs {
		return nil, 0, false
	}
	o := m.comps[slot]
	if o == nil || (slot == KernelSlot && m.kern != nil) {
		return nil, 0, false
	}
	g := m.g(slot, idx)
	d := loadDir(&m.dir[g])
	if st := o.bufs[idx].state; (st != bufClient && st != bufOrphan) || d.NPages == 0 || d.Gen != id.Gen() {
		return nil, 0, false
	}
	return o, g, true
}

// may says whether c may read buffer g of o: same uid, or granted.
func (m *Manager) may(c, o *component, g uint64, gen uint16) bool {
	if c.uid == o.uid {
		return true
	}
	h, ok := c.held[g]
	return ok && h == gen
}

// bufFd is an exporting owner's own buffer, read-write, to map at its
// place in its pool.
func (m *Manager) bufFd(c *component, idx uint32, gen uint16) (int, unix.Errno) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, g, ok := m.bufferOf(makeID(gen, c.slot, idx))
	if !ok || o != c || !c.exporting {
		c.refusedIDs++
		m.refusedIDs.Add(1)
		return -1, unix.ENOENT
	}
	fd, ok := c.bfd[idx]
	if !ok {
		c.refusedIDs++
		m.refusedIDs.Add(1)
		return -1, unix.ENOENT
	}
	_ = g
	if d := dupFd(fd); d >= 0 {
		return d, 0
	}
	return -1, unix.EMFILE
}

// mapBuf is one exported buffer, read-only, for a component that may read it.
func (m *Manager) mapBuf(c *component, id ID) (int, uint64, unix.Errno) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, g, ok := m.bufferOf(id)
	var fd int
	if ok {
		fd, ok = o.bfd[id.Index()]
	}
	if !ok || !m.may(c, o, g, id.Gen()) {
		c.refusedIDs++
		m.refusedIDs.Add(1)
		return -1, 0, unix.EACCES
	}
	ro, err := readOnlyFd(fd)
	if err != nil {
		return -1, 0, unix.EMFILE
	}
	return ro, uint64(o.bufs[id.Index()].npages) * PageSize, 0
}

// grant lets the component with token t read buffer id: c must be able to
// read it itself, and its owner must export (or be of t's uid).
func (m *Manager) grant(c *component, id ID, t Token) unix.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, g, ok := m.bufferOf(id)
	if !ok || !m.may(c, o, g, id.Gen()) {
		c.refusedIDs++
		m.refusedIDs.Add(1)
		return unix.EACCES
	}
	p := m.byToken(t)
	if p == nil {
		return unix.ESRCH
	}
	if p.uid == o.uid {
		return 0 // it shares the owner's pool already
	}
	if _, ok := o.bfd[id.Index()]; !ok {
		return unix.EOPNOTSUPP // the owner did not export
	}
	if h, ok := p.held[g]; ok && h == id.Gen() {
		return 0
	}
	u, err := m.uidDirOf(p.uid)
	if err != nil {
		return unix.ENOMEM
	}
	p.held[g] = id.Gen()
	if m.grants[g] == nil {
		m.grants[g] = map[*component]bool{}
	}
	m.grants[g][p] = true
	if u.xref[g] == 0 {
		storeDir(&u.dir[g], loadDir(&m.dir[g]))
	}
	u.xref[g]++
	o.bufs[id.Index()].xuid = true
	if o.metas != nil {
		setFlag(&o.metas[g].Cnt, FlagGranted)
	}
	m.refreshAlive()
	return 0
}

// unref drops one grant of g to a component of uid u; the last one takes
// the entry out of that uid's directory.
func (m *Manager) unref(uid uint32, g uint64) {
	u := m.uids[uid]
	if u == nil {
		return
	}
	if u.xref[g]--; u.xref[g] <= 0 {
		delete(u.xref, g)
		storeDir(&u.dir[g], Dir{Gen: loadDir(&m.dir[g]).Gen})
	}
}

// dropGrants forgets every grant of g (the buffer is being destroyed).
func (m *Manager) dropGrants(g uint64) {
	for p := range m.grants[g] {
		delete(p.held, g)
		m.unref(p.uid, g)
	}
	delete(m.grants, g)
}

// dropHeld forgets the grants a departing component held.
func (m *Manager) dropHeld(c *component) {
	for g := range c.held {
		if gs := m.grants[g]; gs != nil {
			delete(gs, c)
			if len(gs) == 0 {
				delete(m.grants, g)
			}
		}
		m.unref(c.uid, g)
	}
	c.held = map[uint64]uint16{}
}

// counts reports whether c's counter word for g takes part in liveness:
// a component of another uid counts only for buffers granted to it (and
// the kernel's), so it cannot pin buffers it was never given.
func (m *Manager) counts(c *component, g uint64) bool {
	slot := uint32(g / uint64(m.maxBufs))
	if slot == KernelSlot && m.kern != nil {
		return true
	}
	o := m.comps[slot]
	if o == nil || o.uid == c.uid {
		return true
	}
	_, ok := c.held[g]
	return ok
}

func (m *Manager) mapErr(c *component) {
	c.refusedMap++
	m.refusedMap.Add(1)
}
