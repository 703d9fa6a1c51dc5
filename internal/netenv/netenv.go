// Package netenv builds throwaway network topologies for tests, benchmarks and
// the doctor: two named network namespaces joined by a veth pair.
//
// Everything a Pair creates is removed by Close, and a Pair left behind by a
// crashed run is removed by the next NewPair with the same name. A name is
// held by one process at a time (flock on /run/lock/cistern-netenv-NAME.lock,
// released with Close or the process's death): a second checkout's tests or
// bench using the same name wait instead of deleting the first's namespaces.
package netenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/mounts"
)

// Pair is a server namespace and a client namespace joined by a veth pair.
type Pair struct {
	Name               string
	ServerNS, ClientNS netns.NsHandle
	ServerIf, ClientIf string // interface names inside their namespace
	ServerIP, ClientIP net.IP
	ServerMAC          net.HardwareAddr
	ClientMAC          net.HardwareAddr
	ServerIfindex      int
	ClientIfindex      int
	lock               *os.File // the name's flock, held until Close
}

// Options configure NewPair.
type Options struct {
	// Subnet selects 10.200.<Subnet>.0/24 so concurrent pairs do not clash.
	Subnet uint8
	// MTU of both veth ends; 0 keeps the default.
	MTU int
	// Queues gives each veth end that many RX and TX queues (0: one). A
	// veth hands XDP frames to the peer queue of the sending CPU, so with
	// a queue per CPU each CPU's frames are received on that CPU.
	Queues int
}

// ServerNSName and ClientNSName are the names under /var/run/netns.
func (p *Pair) ServerNSName() string { return "cistern-" + p.Name + "-srv" }
func (p *Pair) ClientNSName() string { return "cistern-" + p.Name + "-cli" }

// NewPair creates the namespaces "cistern-<name>-srv" and "cistern-<name>-cli"
// with a veth between them, addresses 10.200.<subnet>.1 (server) and .2
// (client), both ends up, and loopback up in each namespace.
func NewPair(name string, opt Options) (_ *Pair, err error) {
	if len(name) > 8 {
		return nil, fmt.Errorf("netenv: name %q longer than 8 characters", name)
	}
	// p is not the named result: `return nil, err` must not clear it before
	// the deferred clean-up runs.
	p := &Pair{
		Name:     name,
		ServerNS: -1, ClientNS: -1,
		ServerIf: "cs" + name + "s",
		ClientIf: "cs" + name + "c",
		ServerIP: net.IPv4(10, 200, opt.Subnet, 1).To4(),
		ClientIP: net.IPv4(10, 200, opt.Subnet, 2).To4(),
	}
	if p.lock, err = lockName(name); err != nil {
		return nil, err
	}
	// A previous run that died may have left these behind (it no longer
	// holds the name's lock).
	_ = deleteNamed(p.ServerNSName())
	_ = deleteNamed(p.ClientNSName())
	if l, e := netlink.LinkByName(p.ServerIf); e == nil {
		_ = netlink.LinkDel(l)
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()

	if p.ServerNS, err = newNamed(p.ServerNSName()); err != nil {
		return nil, err
	}
	if p.ClientNS, err = newNamed(p.ClientNSName()); err != nil {
		return nil, err
	}

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.ServerIf, MTU: opt.MTU}, PeerName: p.ClientIf}
	if opt.Queues > 1 {
		q := opt.Queues
		veth.NumTxQueues, veth.NumRxQueues = q, q
		veth.PeerNumTxQueues, veth.PeerNumRxQueues = uint32(q), uint32(q)
	}
	if err = netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("netenv: create veth: %w", err)
	}
	if err = moveAndConfigure(p.ServerIf, p.ServerNS, p.ServerIP); err != nil {
		return nil, err
	}
	if err = moveAndConfigure(p.ClientIf, p.ClientNS, p.ClientIP); err != nil {
		return nil, err
	}
	if p.ServerIfindex, p.ServerMAC, err = linkInfo(p.ServerNS, p.ServerIf); err != nil {
		return nil, err
	}
	if p.ClientIfindex, p.ClientMAC, err = linkInfo(p.ClientNS, p.ClientIf); err != nil {
		return nil, err
	}
	return p, nil
}

func newNamed(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return -1, err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name) // also switches this thread into it
	if err != nil {
		// Refused before switching (no CAP_SYS_ADMIN: a container): this
		// thread is where it was, and setns would be refused too.
		if cur, gerr := netns.Get(); gerr == nil {
			same := cur.Equal(orig)
			cur.Close()
			if same {
				return -1, fmt.Errorf("netenv: create namespace %s: %w", name, err)
			}
		}
	}
	if serr := netns.Set(orig); serr != nil {
		// The thread is stuck in the wrong namespace: never reuse it.
		runtime.Goexit()
	}
	if err != nil {
		return -1, fmt.Errorf("netenv: create namespace %s: %w", name, err)
	}
	return ns, nil
}

func moveAndConfigure(ifname string, ns netns.NsHandle, ip net.IP) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("netenv: find %s: %w", ifname, err)
	}
	if err := netlink.LinkSetNsFd(l, int(ns)); err != nil {
		return fmt.Errorf("netenv: move %s: %w", ifname, err)
	}
	h, err := routeHandle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if lo, err := h.LinkByName("lo"); err == nil {
		_ = h.LinkSetUp(lo)
	}
	l, err = h.LinkByName(ifname)
	if err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)}}
	if err := h.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("netenv: address %s: %w", ifname, err)
	}
	return h.LinkSetUp(l)
}

// routeHandle opens rtnetlink only: a handle for every family also opens
// NETLINK_XFRM, which fails with "protocol not supported" on kernels where
// xfrm_user is a module not loaded (Debian's 6.1 and 6.12 cloud kernels).
func routeHandle(ns netns.NsHandle) (*netlink.Handle, error) {
	return netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
}

func linkInfo(ns netns.NsHandle, ifname string) (int, net.HardwareAddr, error) {
	h, err := routeHandle(ns)
	if err != nil {
		return 0, nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err != nil {
		return 0, nil, err
	}
	return l.Attrs().Index, l.Attrs().HardwareAddr, nil
}

// Do runs fn on an OS thread that has entered ns, and restores the thread.
// Sockets, links and BPF attachments made by fn keep their namespace after.
func Do(ns netns.NsHandle, fn func() error) error {
	return onThreadIn(func() (netns.NsHandle, error) {
		if err := netns.Set(ns); err != nil {
			return netns.None(), fmt.Errorf("netenv: enter namespace: %w", err)
		}
		return netns.None(), nil
	}, fn)
}

// onThreadIn runs fn on a locked OS thread that enter moved into a
// namespace, then moves the thread back. enter may return a handle to close
// afterwards. A thread that cannot go back stays locked, so the runtime
// discards it instead of reusing it in the wrong namespace.
func onThreadIn(enter func() (netns.NsHandle, error), fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		h, err := enter()
		if err != nil {
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			errc <- err
			return
		}
		ferr := fn()
		if h.IsOpen() {
			h.Close()
		}
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Command returns a command that runs inside the named namespace.
func Command(nsName, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", nsName, name}, args...)...)
}

// Close deletes both namespaces; the veth goes with them.
func (p *Pair) Close() error {
	if p == nil {
		return nil
	}
	var errs []error
	for _, h := range []netns.NsHandle{p.ServerNS, p.ClientNS} {
		if h >= 0 {
			h.Close()
		}
	}
	for _, n := range []string{p.ServerNSName(), p.ClientNSName()} {
		if err := deleteNamed(n); err != nil {
			errs = append(errs, err)
		}
	}
	p.ServerNS, p.ClientNS = -1, -1
	if p.lock != nil {
		p.lock.Close() // releases the flock
		p.lock = nil
		heldMu.Lock()
		delete(held, p.Name)
		heldMu.Unlock()
	}
	return errors.Join(errs...)
}

// lockName takes the machine-wide lock of pair name, waiting for another
// process that holds it.
func lockName(name string) (*os.File, error) {
	// flock excludes a second open in this process too: refuse, not hang.
	heldMu.Lock()
	defer heldMu.Unlock()
	if held[name] {
		return nil, fmt.Errorf("netenv: pair %q is already in use by this process (close it first)", name)
	}
	f, err := os.OpenFile(fmt.Sprintf("%s/cistern-netenv-%s.lock", mounts.LockDir(), name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netenv: lock %s: %w", name, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netenv: lock %s: %w", name, err)
	}
	held[name] = true
	return f, nil
}

var (
	heldMu sync.Mutex
	held   = map[string]bool{} // names whose lock this process holds
)

func deleteNamed(name string) error {
	if _, err := os.Stat("/var/run/netns/" + name); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("netenv: delete namespace %s: %w", name, err)
	}
	return nil
}
