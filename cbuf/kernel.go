package cbuf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// KernelSource is the kernel as a component (package cbuf/kcomp): one-page
// buffers in BPF map memory that a BPF program fills and sends.
type KernelSource interface {
	Pages() uint32
	ReadOnlyFd() (int, error)                 // the pool, mappable read-only only
	Take(ctx context.Context) (uint32, error) // next page the kernel sent
	Give(idx uint32) error                    // a dead page back to the kernel
	Drops() uint64                            // events that found no free page
}

type kernelComp struct {
	src      KernelSource
	out      map[uint32]bool // pages handed to components, not yet dead
	handed   uint64
	returned uint64
}

// AttachKernel makes src the component in KernelSlot. Call before Run.
func (m *Manager) AttachKernel(src KernelSource) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.comps[KernelSlot] != nil {
		return errors.New("the kernel slot is taken")
	}
	if src.Pages() > m.maxBufs {
		return fmt.Errorf("kernel pool of %d pages exceeds %d buffer indexes", src.Pages(), m.maxBufs)
	}
	m.kern = &kernelComp{src: src, out: map[uint32]bool{}}
	for i := uint32(0); i < src.Pages(); i++ {
		m.setDir(m.g(KernelSlot, i), Dir{PageOff: i, NPages: 1, Gen: 1})
	}
	return nil
}

// kernelRecv hands the next page the kernel sent to a component: the
// kernel's send is counted in the manager's adjustment (it has no counter
// word of its own), and every component's word is flagged relinquish so the
// last free reports the page for return at once.
func (m *Manager) kernelRecv(ctx context.Context, timeout time.Duration) (ID, error) {
	if m.kern == nil {
		return 0, unix.ENODEV
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	// bounded: the ring buffer read only stops at its deadline, and the
	// manager waits for it when shutting down
	timeout = min(timeout, 5*time.Second)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	idx, err := m.kern.src.Take(tctx)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, unix.ETIMEDOUT
		}
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if idx >= m.kern.src.Pages() {
		m.drops.Add(1)
		return 0, unix.EIO
	}
	g := m.g(KernelSlot, idx)
	m.adj[g]++
	m.kern.out[idx] = true
	m.kern.handed++
	for _, c := range m.alive {
		setFlag(&c.metas[g].Cnt, FlagRelinquish)
	}
	return makeID(loadDir(&m.dir[g]).Gen, KernelSlot, idx), nil
}

// reapKernel gives every dead page back to the kernel.
func (m *Manager) reapKernel() {
	for idx := range m.kern.out {
		g := m.g(KernelSlot, idx)
		if m.live(g) || !m.resetCounts(g) {
			continue
		}
		if m.kern.src.Give(idx) == nil {
			delete(m.kern.out, idx)
			m.kern.returned++
		}
	}
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}
