package doctor

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel probes ../bpf/doctor/probes.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel -no-global-types structops ../bpf/doctor/structops.bpf.c

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// Slots of the `hits` map; mirror enum probe_slot in probes.bpf.c.
const (
	slotTracepoint = iota
	slotRawTP
	slotTPBTF
	slotUprobe
	slotXDP
	slotTCX
	slotSyscall
	slotRingbuf
	slotTimer
	slotKprobe
	slotFentry
	slotLoop
	slotXDPBytes
)

// probe is one program of probes.bpf.c loaded on its own, with the maps it
// uses and no others: a program or map type the kernel refuses fails its
// own check only.
type probe struct {
	coll *ebpf.Collection
	prog *ebpf.Program
}

func (p *probe) Close() { p.coll.Close() }

func (p *probe) hit(slot uint32) uint64 {
	var v uint64
	if m := p.coll.Maps["hits"]; m != nil {
		_ = m.Lookup(slot, &v)
	}
	return v
}

// waitHit polls a slot until it moves or the deadline passes.
func (p *probe) waitHit(slot uint32, trigger func()) bool {
	for i := 0; i < 50; i++ {
		trigger()
		if p.hit(slot) > 0 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// refuseProbe, set by tests, plays a kernel that refuses some programs.
var refuseProbe func(prog string) error

// loadProbe loads the named program of spec with only the maps it refers
// to (.rodata among them: set variables first).
func loadProbe(spec *ebpf.CollectionSpec, name string) (*probe, error) {
	if refuseProbe != nil {
		if err := refuseProbe(name); err != nil {
			return nil, err
		}
	}
	if _, ok := spec.Programs[name]; !ok {
		return nil, fmt.Errorf("no program %s in the probe object", name)
	}
	sub := spec.Copy() // with the variables set on spec
	refs := map[string]bool{}
	for _, ins := range sub.Programs[name].Instructions {
		if ref := ins.Reference(); ref != "" {
			refs[ref] = true
		}
	}
	for n := range sub.Programs {
		if n != name {
			delete(sub.Programs, n)
		}
	}
	for n := range sub.Maps {
		if !refs[n] && !strings.HasPrefix(n, ".") { // keep .rodata and the like: variables live there
			delete(sub.Maps, n)
		}
	}
	coll, err := ebpf.NewCollection(sub)
	if err != nil {
		return nil, err
	}
	return &probe{coll: coll, prog: coll.Programs[name]}, nil
}

//go:noinline
func uprobeTarget(x int) int { return x*7 + 1 }

// unsupported is the check of a capability the kernel lacks: the probe's
// error, what it costs (the systems that need it, or what they do
// instead), and the kernel release that has it.
func unsupported(name, feature string, err error) Check {
	c := fail(name, Unsupported, err, "")
	c.Core = false
	if feature == "" {
		return c
	}
	// The kernel's own answer ("the bpf_loop helper: not supported by this
	// kernel (needs Linux 5.17 or newer)") says more than a verifier line.
	if kerr := kernel.Has(feature); errors.Is(kerr, kernel.ErrMissing) {
		c.Detail = firstLine(kerr)
	}
	if effect := kernel.Effect(feature); effect != "" {
		c.Detail += " — " + effect
	}
	if f, ok := kernel.Lookup(feature); ok && f.Since != "" && errors.Is(kernel.Has(feature), kernel.ErrMissing) {
		c.Fix = "Linux " + f.Since + " or newer"
	}
	return c
}

func passed(name string, good bool, detail, feature string) Check {
	if good {
		c := ok(name, detail)
		c.Core = false
		return c
	}
	return unsupported(name, feature, errors.New("loaded and attached, but never fired"))
}

func bpfChecks(ctx context.Context) []Check {
	spec, err := loadProbes()
	if err == nil {
		err = spec.Variables["target_tgid"].Set(uint32(os.Getpid()))
	}
	if err == nil {
		err = spec.Variables["ring_cookie"].Set(uint64(0xC15 << 20))
	}
	if err != nil { // the embedded object is broken: a build problem
		return []Check{fail("bpf_objects", Unsupported, err, "rebuild cistern (make generate)")}
	}
	var cs []Check
	cs = append(cs, attachCheck(spec, "tracepoint", "probe_tracepoint", slotTracepoint, "tracepoint",
		func(p *ebpf.Program) (link.Link, error) {
			return link.Tracepoint("syscalls", "sys_enter_getppid", p, nil)
		}, "syscalls/sys_enter_getppid attached and fired"))
	cs = append(cs, attachCheck(spec, "raw_tp", "probe_raw_tp", slotRawTP, "raw_tp",
		func(p *ebpf.Program) (link.Link, error) {
			return link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: p})
		}, "raw_tp/sys_enter attached and fired"))
	cs = append(cs, attachCheck(spec, "tp_btf", "probe_tp_btf", slotTPBTF, "tp_btf",
		func(p *ebpf.Program) (link.Link, error) {
			return link.AttachTracing(link.TracingOptions{Program: p})
		}, "tp_btf/sys_enter attached and fired"))
	cs = append(cs, uprobeCheck(spec))
	cs = append(cs, netChecks(spec)...)
	cs = append(cs, testRunChecks(spec)...)
	cs = append(cs, structOpsCheck())
	cs = append(cs, featureChecks()...)
	cs = append(cs, kprobeCheck(), fentryCheck())
	return cs
}

// attachCheck loads one program, attaches it, and triggers it with getppid.
func attachCheck(spec *ebpf.CollectionSpec, name, prog string, slot uint32, feature string,
	attach func(*ebpf.Program) (link.Link, error), detail string) Check {
	p, err := loadProbe(spec, prog)
	if err != nil {
		return unsupported(name, feature, err)
	}
	defer p.Close()
	l, err := attach(p.prog)
	if err != nil {
		c := unsupported(name, feature, err)
		if name == "tracepoint" {
			c.Fix = "mount tracefs; enable CONFIG_FTRACE_SYSCALLS"
		}
		return c
	}
	defer l.Close()
	return passed(name, p.waitHit(slot, func() { unix.Getppid() }), detail, feature)
}

func uprobeCheck(spec *ebpf.CollectionSpec) Check {
	p, err := loadProbe(spec, "probe_uprobe")
	if err != nil {
		return unsupported("uprobe", "uprobe", err)
	}
	defer p.Close()
	exe, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return unsupported("uprobe", "uprobe", err)
	}
	// Test binaries carry no symbol table: fall back to the function's
	// file offset, found through /proc/self/maps.
	var opts *link.UprobeOptions
	if off, err := selfFileOffset(reflect.ValueOf(uprobeTarget).Pointer()); err == nil {
		opts = &link.UprobeOptions{Address: off}
	}
	l, err := exe.Uprobe("github.com/cistern-ebpf/cistern/doctor.uprobeTarget", p.prog, opts)
	if err != nil {
		return unsupported("uprobe", "uprobe", err)
	}
	defer l.Close()
	good := p.waitHit(slotUprobe, func() { uprobeTarget(3) })
	return passed("uprobe", good, "uprobe on this binary attached and fired (uprobes on libssl work the same way)", "uprobe")
}

// netChecks attach XDP (generic and native) and TCX to a veth inside a
// throwaway namespace pair and send a UDP packet through it.
func netChecks(spec *ebpf.CollectionSpec) []Check {
	pair, err := netenv.NewPair(fmt.Sprintf("dr%d", os.Getpid()%100000), netenv.Options{Subnet: 250})
	if err != nil {
		var cs []Check
		for _, n := range []string{"xdp_generic", "xdp_native", "tcx"} {
			c := fail(n, Missing, err, "run as root with veth support (the veth module)")
			c.Core = false
			cs = append(cs, c)
		}
		return cs
	}
	defer pair.Close()

	send := func() {
		_ = netenv.Do(pair.ClientNS, func() error {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: pair.ServerIP, Port: 9})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("cistern doctor"))
			return err
		})
	}
	attach := func(name, prog string, slot uint32, feature string, attach func(*ebpf.Program) (link.Link, error), detail string) Check {
		p, err := loadProbe(spec, prog)
		if err != nil {
			return unsupported(name, feature, err)
		}
		defer p.Close()
		var l link.Link
		if err := netenv.Do(pair.ServerNS, func() (err error) { l, err = attach(p.prog); return err }); err != nil {
			return unsupported(name, feature, err)
		}
		defer l.Close()
		return passed(name, p.waitHit(slot, send), detail, feature)
	}
	xdp := func(flags link.XDPAttachFlags) func(*ebpf.Program) (link.Link, error) {
		return func(p *ebpf.Program) (link.Link, error) {
			return link.AttachXDP(link.XDPOptions{Program: p, Interface: pair.ServerIfindex, Flags: flags})
		}
	}
	cs := []Check{
		attach("xdp_generic", "probe_xdp", slotXDP, "xdp", xdp(link.XDPGenericMode), "generic XDP on veth in a throwaway netns saw packets"),
		// Native XDP is an accelerator, not a requirement: generic always works.
		attach("xdp_native", "probe_xdp", slotXDP, "", xdp(link.XDPDriverMode), "native XDP on veth in a throwaway netns saw packets"),
		attach("tcx", "probe_tcx", slotTCX, "tcx", func(p *ebpf.Program) (link.Link, error) {
			return link.AttachTCX(link.TCXOptions{Program: p, Interface: pair.ServerIfindex, Attach: ebpf.AttachTCXIngress})
		}, "TCX ingress on veth saw packets"),
	}
	if c := &cs[1]; c.Status != OK {
		c.Detail += " — generic XDP is used instead"
	}
	return cs
}

// testRun runs an XDP probe once through BPF_PROG_TEST_RUN on a 64-byte
// packet and returns the packet as the program left it.
func testRun(p *probe) ([]byte, uint32, error) {
	in := make([]byte, 64)
	for i := range 8 {
		in[i] = byte(0xA0 + i)
	}
	out := make([]byte, 64)
	ret, err := p.prog.Run(&ebpf.RunOptions{Data: in, DataOut: out})
	return out, ret, err
}

const xdpPass = 2

func testRunChecks(spec *ebpf.CollectionSpec) []Check {
	var cs []Check

	// Ring buffer: a record reserved in the kernel is read back.
	cs = append(cs, func() Check {
		p, err := loadProbe(spec, "probe_ringbuf")
		if err != nil {
			return unsupported("ringbuf", "ringbuf", err)
		}
		defer p.Close()
		rd, err := ringbuf.NewReader(p.coll.Maps["ring"])
		if err != nil {
			return unsupported("ringbuf", "ringbuf", err)
		}
		defer rd.Close()
		if _, ret, err := testRun(p); err != nil || ret != xdpPass {
			return unsupported("ringbuf", "ringbuf", fmt.Errorf("test run: ret %d, %v", ret, err))
		}
		rd.SetDeadline(time.Now().Add(time.Second))
		rec, err := rd.Read()
		switch {
		case err != nil:
			return unsupported("ringbuf", "ringbuf", err)
		case len(rec.RawSample) != 8 || binary.NativeEndian.Uint64(rec.RawSample) != 0xC15<<20:
			return unsupported("ringbuf", "ringbuf", errors.New("record corrupted"))
		}
		c := ok("ringbuf", "record reserved in a test-run XDP program and read back")
		c.Core = false
		return c
	}())

	cs = append(cs, mmapCheck(spec))

	cs = append(cs, func() Check {
		p, err := loadProbe(spec, "probe_loop")
		if err != nil {
			return unsupported("bpf_loop", "bpf_loop", err)
		}
		defer p.Close()
		if _, ret, err := testRun(p); err != nil || ret != xdpPass {
			return unsupported("bpf_loop", "bpf_loop", fmt.Errorf("test run: ret %d, %v", ret, err))
		}
		return passed("bpf_loop", p.hit(slotLoop) == 10, "bpf_loop ran its callback 10 times in a test-run XDP program", "bpf_loop")
	}())

	cs = append(cs, func() Check {
		p, err := loadProbe(spec, "probe_xdp_bytes")
		if err != nil {
			return unsupported("xdp_load_bytes", "xdp_load_bytes", err)
		}
		defer p.Close()
		out, ret, err := testRun(p)
		if err != nil || ret != xdpPass {
			return unsupported("xdp_load_bytes", "xdp_load_bytes", fmt.Errorf("test run: ret %d, %v", ret, err))
		}
		var want [8]byte
		copy(want[:], out[:8])
		good := string(out[8:16]) == string(want[:]) && p.hit(slotXDPBytes) == binary.NativeEndian.Uint64(want[:])
		return passed("xdp_load_bytes", good, "bpf_xdp_load_bytes and bpf_xdp_store_bytes copied packet bytes in a test-run XDP program", "xdp_load_bytes")
	}())

	cs = append(cs, func() Check {
		p, err := loadProbe(spec, "probe_timer")
		if err != nil {
			return unsupported("bpf_timer", "bpf_timer", err)
		}
		defer p.Close()
		if _, ret, err := testRun(p); err != nil || ret != xdpPass {
			return unsupported("bpf_timer", "bpf_timer", fmt.Errorf("arm timer: ret %d, %v", ret, err))
		}
		return passed("bpf_timer", p.waitHit(slotTimer, func() {}), "bpf_timer armed from a test-run XDP program fired", "bpf_timer")
	}())

	// SYSCALL programs: reported, not needed (Cistern test-runs XDP programs).
	cs = append(cs, func() Check {
		p, err := loadProbe(spec, "probe_syscall")
		if err != nil {
			return unsupported("syscall_prog", "syscall_prog", err)
		}
		defer p.Close()
		if _, err := p.prog.Run(&ebpf.RunOptions{}); err != nil {
			return unsupported("syscall_prog", "syscall_prog", err)
		}
		return passed("syscall_prog", p.hit(slotSyscall) == 1, "BPF_PROG_TEST_RUN of a SYSCALL program (Cistern does not need it)", "syscall_prog")
	}())
	return cs
}

// mmapCheck: an mmapable array's counter read through mmap equals the one
// from a lookup.
func mmapCheck(spec *ebpf.CollectionSpec) Check {
	p, err := loadProbe(spec, "probe_loop")
	if err != nil {
		p, err = loadProbe(spec, "probe_ringbuf")
	}
	if err != nil {
		// Neither program loads: try the map alone.
		m, merr := ebpf.NewMap(spec.Maps["hits"])
		if merr != nil {
			return unsupported("mmap_array", "mmap_array", merr)
		}
		defer m.Close()
		if _, merr := m.Memory(); merr != nil {
			return unsupported("mmap_array", "mmap_array", merr)
		}
		c := ok("mmap_array", "BPF_F_MMAPABLE array mapped")
		c.Core = false
		return c
	}
	defer p.Close()
	mem, err := p.coll.Maps["hits"].Memory()
	if err != nil {
		return unsupported("mmap_array", "mmap_array", err)
	}
	if _, _, err := testRun(p); err != nil {
		return unsupported("mmap_array", "mmap_array", err)
	}
	var b [8]byte
	for slot := uint32(0); slot < 16; slot++ {
		_, _ = mem.ReadAt(b[:], int64(slot)*8)
		if binary.NativeEndian.Uint64(b[:]) != p.hit(slot) {
			return unsupported("mmap_array", "mmap_array", fmt.Errorf("slot %d differs through mmap", slot))
		}
	}
	return passed("mmap_array", p.hit(slotLoop)+p.hit(slotRingbuf) > 0, "BPF_F_MMAPABLE array read through mmap", "mmap_array")
}

// structOpsCheck registers a do-nothing TCP congestion control: through a
// struct_ops link where the kernel has them (6.4), else by writing the
// struct_ops map (and deleting it again).
func structOpsCheck() Check {
	c := func() Check {
		spec, err := loadStructops()
		if err != nil {
			return unsupported("struct_ops", "struct_ops", err)
		}
		legacy := kernel.AdaptStructOps(spec)
		var objs structopsObjects
		if err := spec.LoadAndAssign(&objs, nil); err != nil {
			return unsupported("struct_ops", "struct_ops", err)
		}
		defer objs.Close()
		how := "through a struct_ops link"
		if len(legacy) > 0 {
			defer kernel.UnregisterStructOps(objs.CisternProbeCc)
			f, _ := kernel.Lookup("struct_ops_link")
			how = "by a struct_ops map update, as struct_ops links need Linux " + f.Since
		} else {
			l, err := link.AttachStructOps(link.StructOpsOptions{Map: objs.CisternProbeCc})
			if err != nil {
				return unsupported("struct_ops", "struct_ops_link", err)
			}
			defer l.Close()
		}
		avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
		return passed("struct_ops", strings.Contains(string(avail), "cistern_probe"),
			"tcp_congestion_ops registered "+how+" (Cistern does not need struct_ops)", "struct_ops")
	}()
	c.Core = false
	return c
}

// featureChecks report the kernel features that have no program of their
// own to try here.
func featureChecks() []Check {
	var cs []Check
	for _, f := range []struct{ name, ok string }{
		{"atomics", "BPF atomic fetch-add and compare-and-exchange load"},
		{"for_each_map_elem", "the bpf_for_each_map_elem helper loads"},
		{"cachestat", "cachestat(2) answers"},
		{"filemap_get_pages", "the mm_filemap_get_pages tracepoint exists"},
		{"xdp_live_frames", "BPF_PROG_RUN sends XDP frames (bench kv's kernel load generator)"},
		{"sockmap_verdict", "an sk_skb verdict attaches to a sockmap (kv answers TCP GETs in the kernel)"},
		{"sockmap_self_redirect", "a segment redirected to its own socket during the socket's first read (loopback self-test) left no unread bytes: kv serve answers TCP GETs by default"},
	} {
		if err := kernel.Has(f.name); err != nil {
			cs = append(cs, unsupported(f.name, f.name, err))
		} else {
			c := ok(f.name, f.ok)
			c.Core = false
			cs = append(cs, c)
		}
	}
	return cs
}

// kprobe and fentry are expected to fail on this class of kernel; Cistern
// never depends on them (package kernel probes them).
func kprobeCheck() Check {
	if err := kernel.Kprobe(); err != nil {
		return Check{Name: "kprobe", Status: Unsupported, Detail: firstLine(err) +
			": kprobes are unavailable (CONFIG_KPROBES off); Cistern uses tracepoints, tp_btf and uprobes instead"}
	}
	return Check{Name: "kprobe", Status: OK, Detail: "kprobes attach (Cistern does not need them)"}
}

func fentryCheck() Check {
	if err := kernel.Fentry(); err != nil {
		return Check{Name: "fentry", Status: Unsupported, Detail: firstLine(err) +
			": fentry/fexit/fmod_ret/LSM are refused here; Cistern uses tracepoints, tp_btf and uprobes instead"}
	}
	return Check{Name: "fentry", Status: OK, Detail: "fentry attaches (Cistern does not need it)"}
}

// selfFileOffset converts an address in this process's executable mapping
// into an offset in the executable file.
func selfFileOffset(addr uintptr) (uint64, error) {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		var start, end, off uint64
		var perms string
		if _, err := fmt.Sscanf(line, "%x-%x %s %x", &start, &end, &perms, &off); err != nil {
			continue
		}
		if uint64(addr) >= start && uint64(addr) < end && strings.Contains(perms, "x") {
			return uint64(addr) - start + off, nil
		}
	}
	return 0, fmt.Errorf("address %#x not in an executable mapping", addr)
}

func firstLine(err error) string {
	s := strings.Replace(fmt.Sprint(err), " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", "", 1)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
