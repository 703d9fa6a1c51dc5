// Package tc attaches tc (SchedCLS) programs: with a TCX link where the
// kernel has TCX (kernel.TCX, Linux 6.6), else with a clsact qdisc and a
// cls_bpf filter, which it shares with other processes and cleans up
// after. Package kernel only answers whether TCX works; attaching, and the
// qdisc and filter bookkeeping it needs, is here.
package tc

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/kernel"
)

// ForceClsBPFEnv, set to 1, makes Attach use the cls_bpf variant even
// where TCX works: for tests and the kernel matrix, so the fallback that
// Linux 6.1 gets is exercised on newer kernels too. It is read at every
// Attach and Mode call.
const ForceClsBPFEnv = "CISTERN_FORCE_CLS_BPF"

func forcedClsBPF() bool { return os.Getenv(ForceClsBPFEnv) == "1" }

// Variant is how Attach attaches a tc program.
type Variant string

const (
	VariantTCX    Variant = "tcx"     // a TCX link
	VariantClsBPF Variant = "cls_bpf" // a clsact qdisc and a direct-action cls_bpf filter
)

// Choice is the variant Attach uses on this kernel and why.
func Choice() (Variant, string) {
	if forcedClsBPF() {
		return VariantClsBPF, "forced by " + ForceClsBPFEnv + "=1"
	}
	err := kernel.TCX()
	switch {
	case err == nil:
		return VariantTCX, ""
	case errors.Is(err, kernel.ErrMissing):
		f, _ := kernel.Lookup("tcx")
		return VariantClsBPF, "TCX needs Linux " + f.Since
	default:
		return VariantClsBPF, err.Error()
	}
}

// Mode says in a few words how tc programs are attached here: "tcx", or
// "cls_bpf (TCX needs Linux 6.6)".
func Mode() string {
	v, why := Choice()
	if why == "" {
		return string(v)
	}
	return fmt.Sprintf("%s (%s)", v, why)
}

// Direction is the hook of Attach.
type Direction int

const (
	Ingress Direction = iota
	Egress
)

func (d Direction) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// Link is a tc program attached by Attach; Close detaches it.
type Link struct {
	Variant Variant
	// Stale counts cls_bpf filters of the same name on the same hook that
	// Attach removed first: left by a process that ended without closing
	// (unlike TCX links, filters outlive their process).
	Stale int

	tcx link.Link

	// cls_bpf
	ns      netns.NsHandle // the namespace of the interface (kept open until Close)
	filter  netlink.BpfFilter
	key     string // ns and ifindex, for the created-qdisc registry
	closed  bool
	closeMu sync.Mutex
}

// Close detaches the program: it closes the TCX link, or deletes exactly
// the cls_bpf filter Attach added, and the clsact qdisc too when Attach
// created it and no filter is left on it. A filter already gone with its
// interface is not an error.
func (l *Link) Close() error {
	l.closeMu.Lock()
	defer l.closeMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.tcx != nil {
		return l.tcx.Close()
	}
	defer l.ns.Close()
	h, err := netlink.NewHandleAt(l.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("tc: netlink in the interface's namespace: %w", err)
	}
	defer h.Close()

	qdiscMu.Lock()
	defer qdiscMu.Unlock()
	delete(liveFilters, l.filterKey())
	f := l.filter
	f.Fd = -1
	f.DirectAction = false
	// Already gone (with its interface, or deleted by hand) is fine.
	if err := h.FilterDel(&f); err != nil && !gone(err) {
		return fmt.Errorf("tc: delete cls_bpf filter %s: %w", l.filter.Name, err)
	}
	if !createdQdiscs[l.key] {
		return nil
	}
	idx := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: l.filter.LinkIndex}}
	if _, err := h.FilterList(idx, netlink.HANDLE_MIN_INGRESS); gone(err) {
		delete(createdQdiscs, l.key) // the interface is gone, and its qdisc with it
		return nil
	}
	if l.qdiscInUse(h, idx) {
		return nil
	}
	delete(createdQdiscs, l.key)
	if err := h.QdiscDel(clsact(l.filter.LinkIndex)); err != nil && !gone(err) {
		return fmt.Errorf("tc: delete the clsact qdisc it created: %w", err)
	}
	return nil
}

func (l *Link) filterKey() string {
	return fmt.Sprintf("%s/%x/%d/%x", l.key, l.filter.Parent, l.filter.Priority, l.filter.Handle)
}

// gone: the filter, qdisc or interface no longer exists.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}

var (
	qdiscMu sync.Mutex
	// createdQdiscs: clsact qdiscs this process created ("ns/ifindex"),
	// removed again by the Close that leaves them empty.
	createdQdiscs = map[string]bool{}
	// liveFilters: cls_bpf filters attached by this process and not closed;
	// never taken for stale ones.
	liveFilters = map[string]bool{}
)

func clsact(ifindex int) *netlink.Clsact {
	return &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: ifindex,
		Handle:    netlink.MakeHandle(0xffff, 0),
		Parent:    netlink.HANDLE_CLSACT,
	}}
}

// Attach attaches prog, a SchedCLS program, to the ingress or egress tc
// hook of ifindex in the calling thread's network namespace (inside
// netenv.Do, the namespace entered). It uses a TCX link when kernel.TCX()
// is nil (and ForceClsBPFEnv is not set), else a clsact qdisc (added if absent)
// and a cls_bpf filter in direct-action mode, named "cistern:<program
// name>", at the lowest free priority. Both run the program with the same
// TC_ACT_* return codes (TCX_NEXT is TC_ACT_UNSPEC), so one program serves
// both. A cls_bpf filter runs after every TCX program and after filters
// of lower priority number.
func Attach(prog *ebpf.Program, ifindex int, dir Direction) (*Link, error) {
	v, _ := Choice()
	if v == VariantTCX {
		at := ebpf.AttachTCXIngress
		if dir == Egress {
			at = ebpf.AttachTCXEgress
		}
		l, err := link.AttachTCX(link.TCXOptions{Program: prog, Interface: ifindex, Attach: at})
		if err != nil {
			return nil, fmt.Errorf("tcx %s: %w", dir, err)
		}
		return &Link{Variant: VariantTCX, tcx: l}, nil
	}
	return attachClsBPF(prog, ifindex, dir)
}

func attachClsBPF(prog *ebpf.Program, ifindex int, dir Direction) (_ *Link, err error) {
	runtime.LockOSThread()
	ns, err := netns.Get()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("tc: current network namespace: %w", err)
	}
	defer func() {
		if err != nil {
			ns.Close()
		}
	}()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("tc: netlink: %w", err)
	}
	defer h.Close()

	name, handle := "cistern", uint32(0)
	if info, err := prog.Info(); err == nil {
		if info.Name != "" {
			name = "cistern:" + info.Name
		}
		if id, ok := info.ID(); ok {
			handle = uint32(id)
		}
	}
	if handle == 0 {
		handle = uint32(os.Getpid())<<8 | uint32(dir)
	}
	parent := uint32(netlink.HANDLE_MIN_INGRESS)
	if dir == Egress {
		parent = netlink.HANDLE_MIN_EGRESS
	}
	l := &Link{Variant: VariantClsBPF, ns: ns, key: ns.UniqueId() + "/" + strconv.Itoa(ifindex)}
	idx := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}

	qdiscMu.Lock()
	defer qdiscMu.Unlock()

	// The clsact qdisc: reuse it, or add it and remember that we did.
	qs, err := h.QdiscList(idx)
	if err != nil {
		return nil, fmt.Errorf("tc: list qdiscs of interface %d: %w", ifindex, err)
	}
	have := false
	for _, q := range qs {
		if q.Attrs().Parent != netlink.HANDLE_CLSACT {
			continue
		}
		switch q.Type() {
		case "clsact":
			have = true
		case "ingress":
			if dir == Egress {
				return nil, fmt.Errorf("tc: interface %d has an ingress qdisc, and cls_bpf egress needs clsact (replace it: tc qdisc replace dev IFACE clsact)", ifindex)
			}
			have = true
		}
	}
	if !have {
		err := h.QdiscAdd(clsact(ifindex))
		switch {
		case err == nil:
			createdQdiscs[l.key] = true
		case errors.Is(err, unix.EEXIST): // added meanwhile by someone else
		default:
			return nil, fmt.Errorf("tc: add clsact qdisc to interface %d: %w (is sch_ingress available?)", ifindex, err)
		}
	}
	defer func() {
		if err != nil && createdQdiscs[l.key] && !l.qdiscInUse(h, idx) {
			delete(createdQdiscs, l.key)
			h.QdiscDel(clsact(ifindex))
		}
	}()

	for try := 0; ; try++ {
		fs, err := h.FilterList(idx, parent)
		if err != nil {
			return nil, fmt.Errorf("tc: list %s filters of interface %d: %w", dir, ifindex, err)
		}
		used := map[uint16]bool{}
		for _, f := range fs {
			a := f.Attrs()
			if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == name {
				k := fmt.Sprintf("%s/%x/%d/%x", l.key, a.Parent, a.Priority, a.Handle)
				if !liveFilters[k] {
					old := netlink.BpfFilter{FilterAttrs: *a, Fd: -1}
					if err := h.FilterDel(&old); err == nil || gone(err) {
						l.Stale++
						continue
					}
				}
			}
			used[a.Priority] = true
		}
		prio := uint16(1)
		for used[prio] && prio < 0xffff {
			prio++
		}
		l.filter = netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{
				LinkIndex: ifindex,
				Parent:    parent,
				Handle:    handle,
				Priority:  prio,
				Protocol:  unix.ETH_P_ALL,
			},
			Fd:           prog.FD(),
			Name:         name,
			DirectAction: true,
		}
		err = h.FilterAdd(&l.filter)
		if err == nil {
			liveFilters[l.filterKey()] = true
			return l, nil
		}
		// Another process took that priority meanwhile: look again.
		if try < 3 && (errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EINVAL)) {
			continue
		}
		return nil, fmt.Errorf("tc: add cls_bpf %s filter to interface %d: %w (is cls_bpf available?)", dir, ifindex, err)
	}
}

// qdiscInUse: some filter is on either hook of the clsact qdisc (or the
// lists cannot be read).
func (l *Link) qdiscInUse(h *netlink.Handle, idx netlink.Link) bool {
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := h.FilterList(idx, parent)
		if err != nil || len(fs) > 0 {
			return true
		}
	}
	return false
}
