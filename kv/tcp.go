package kv

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/mounts"
	"github.com/cistern-ebpf/cistern/kernel"
)

// kv_clock slots (enum kv_clock, cistern/kv.h) the loader writes.
const clockNetns = 6

// tcpPath is the TCP data path while attached: the sk_skb verdict and the
// sk_msg program on kv_socks, and the sockops program on the cgroup root
// that puts memcached's accepted connections into it (bpf/kv/tcp.bpf.h).
type tcpPath struct {
	s      *Server
	sockop link.Link
	progs  []rawAttach
}

type rawAttach struct {
	prog *ebpf.Program
	typ  ebpf.AttachType
}

// attachTCP attaches the TCP path for memcached in the current network
// namespace (Attach runs in the interface's). Only connections accepted
// from now on are served in the kernel.
func (s *Server) attachTCP() error {
	if s.tcpRefused != nil {
		s.TCPMode = "off: " + s.tcpRefused.Error()
		return nil
	}
	if err := kernel.Has("sockmap_verdict"); err != nil {
		s.TCPMode = "off: " + err.Error()
		return nil
	}
	cookie, err := netnsCookie()
	if err != nil {
		s.TCPMode = "off: " + err.Error()
		return nil
	}
	cg := cgroupRoot()
	if cg == "" {
		s.TCPMode = "off: no cgroup v2 mount for the sockops program"
		return nil
	}
	t := &tcpPath{s: s}
	for _, p := range []rawAttach{{s.objs.KvTcpVerdict, ebpf.AttachSkSKBVerdict}, {s.objs.KvTcpMsg, ebpf.AttachSkMsgVerdict}} {
		if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: s.objs.KvSocks.FD(), Program: p.prog, Attach: p.typ}); err != nil {
			t.close()
			return fmt.Errorf("attach %v to kv_socks: %w", p.typ, err)
		}
		t.progs = append(t.progs, p)
	}
	if err := s.objs.KvClock.Update(uint32(clockNetns), cookie, ebpf.UpdateAny); err != nil {
		t.close()
		return fmt.Errorf("kv_clock netns: %w", err)
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: ebpf.AttachCGroupSockOps, Program: s.objs.KvSockops})
	if err != nil {
		t.close()
		return fmt.Errorf("attach sockops to %s: %w", cg, err)
	}
	t.sockop = l
	s.tcp = t
	s.TCPMode = "sockmap"
	return nil
}

// TCPRuntime is the time the kernel spent so far in the TCP path's
// verdict and sk_msg programs, and how many times they ran. It grows only
// while run-time statistics are on (ebpf.EnableStats, or the sysctl
// kernel.bpf_stats_enabled).
func (s *Server) TCPRuntime() (time.Duration, uint64, error) {
	var d time.Duration
	var n uint64
	for _, p := range []*ebpf.Program{s.objs.KvTcpVerdict, s.objs.KvTcpMsg} {
		if p == nil {
			continue
		}
		st, err := p.Stats()
		if err != nil {
			return 0, 0, err
		}
		d += st.Runtime
		n += st.RunCount
	}
	return d, n, nil
}

// close detaches the TCP path. Connections already in kv_socks keep the
// verdict until they close or the map goes (Server.Close).
func (t *tcpPath) close() error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.sockop != nil {
		errs = append(errs, t.sockop.Close())
		t.sockop = nil
	}
	t.s.objs.KvClock.Update(uint32(clockNetns), uint64(0), ebpf.UpdateAny)
	for _, p := range t.progs {
		errs = append(errs, link.RawDetachProgram(link.RawDetachProgramOptions{Target: t.s.objs.KvSocks.FD(), Program: p.prog, Attach: p.typ}))
	}
	t.progs = nil
	return errors.Join(errs...)
}

// tcpProgram tells the TCP path's programs (tcp.bpf.h) from the rest:
// they are the ones that run on sockets (sockops, the sk_skb verdict,
// sk_msg); everything else runs on packets (XDP, tc).
func tcpProgram(p *ebpf.ProgramSpec) bool {
	switch p.Type {
	case ebpf.SockOps, ebpf.SkSKB, ebpf.SkMsg:
		return true
	}
	return false
}

// loadWithoutTCP loads the object without its TCP programs (the maps
// stay, so nothing else changes) into objs; their fields stay nil.
func loadWithoutTCP(spec *ebpf.CollectionSpec, objs *kernObjects) error {
	spec = spec.Copy()
	for name, p := range spec.Programs {
		if tcpProgram(p) {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return err
	}
	defer coll.Close() // nothing is left in it on success
	var o kernObjects
	if err := errors.Join(coll.Assign(&o.kernMaps), coll.Assign(&o.kernVariables)); err != nil {
		o.Close()
		return err
	}
	progs := reflect.ValueOf(&o.kernPrograms).Elem()
	for i := range progs.NumField() {
		if p := coll.DetachProgram(progs.Type().Field(i).Tag.Get("ebpf")); p != nil {
			progs.Field(i).Set(reflect.ValueOf(p))
		}
	}
	*objs = o
	return nil
}

// netnsCookie is the cookie of the current network namespace
// (SO_NETNS_COOKIE, Linux 5.14).
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("SO_NETNS_COOKIE: %w (needs Linux 5.14)", err)
	}
	return v, nil
}

// cgroupRoot is the cgroup v2 mount, whose sockops program sees every
// socket; the program itself keeps memcached's port in this namespace.
func cgroupRoot() string {
	for _, mp := range mounts.MountPoints("cgroup2") {
		return mp
	}
	return ""
}

// TCPDefault says whether kv serve answers TCP GETs in the kernel when
// --tcp is not given, and why. It follows a behaviour of the running
// kernel, not its version: on by default only where the kernel passes the
// sockmap_self_redirect self-test (package kernel), opt-in elsewhere.
// Kerby-KV already avoids the case that test finds (the verdict waits for
// memcached's first reply on a connection: kv_conn.replied), but memcached
// is still woken for segments the kernel answered (docs/kerby-kv.md).
func TCPDefault() (bool, string) { return tcpDefault(kernel.Has) }

func tcpDefault(has func(feature string) error) (bool, string) {
	if err := has("sockmap_verdict"); err != nil {
		return false, "off: " + err.Error()
	}
	if err := has("sockmap_self_redirect"); err != nil {
		return false, "opt-in (--tcp) on this kernel: its sockmap can leave a segment redirected to its own socket counted as unread " +
			"(cistern doctor: sockmap_self_redirect), where memcached would spin; Kerby-KV passes each connection's requests to memcached " +
			"until memcached's first reply, which avoids that case"
	}
	return true, "on by default: this kernel passed the sockmap_self_redirect self-test (--tcp=false turns it off)"
}
