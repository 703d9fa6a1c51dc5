package cbuf

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

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
	bufNone   = iota
	bufClient // created and handed to its owner (free list, in use or garbage)
	bufOrphan // its owner died while another component still held it
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
	owned   []uint32 // indexes in bufClient or bufOrphan
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
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
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
