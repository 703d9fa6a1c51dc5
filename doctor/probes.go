package doctor

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel -type probe_args probes ../bpf/doctor/probes.bpf.c
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
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/netenv"
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
)

func hit(objs *probesObjects, slot uint32) uint64 {
	var v uint64
	_ = objs.Hits.Lookup(slot, &v)
	return v
}

// waitHit polls a slot until it moves or the deadline passes.
func waitHit(objs *probesObjects, slot uint32, trigger func()) bool {
	for i := 0; i < 50; i++ {
		trigger()
		if hit(objs, slot) > 0 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

//go:noinline
func uprobeTarget(x int) int { return x*7 + 1 }

func bpfChecks(ctx context.Context) []Check {
	var cs []Check
	spec, err := loadProbes()
	if err != nil {
		return []Check{fail("bpf_load", Unsupported, err, "")}
	}
	if err := spec.Variables["target_tgid"].Set(uint32(os.Getpid())); err != nil {
		return []Check{fail("bpf_load", Unsupported, err, "")}
	}
	var objs probesObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return []Check{fail("bpf_load", Unsupported, err, "")}
	}
	defer objs.Close()

	// Tracepoint.
	if l, err := link.Tracepoint("syscalls", "sys_enter_getppid", objs.ProbeTracepoint, nil); err != nil {
		cs = append(cs, fail("tracepoint", Unsupported, err, "mount tracefs; enable CONFIG_FTRACE_SYSCALLS"))
	} else {
		good := waitHit(&objs, slotTracepoint, func() { unix.Getppid() })
		l.Close()
		cs = append(cs, triggered("tracepoint", good, "syscalls/sys_enter_getppid attached and fired"))
	}

	if l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: objs.ProbeRawTp}); err != nil {
		cs = append(cs, fail("raw_tp", Unsupported, err, ""))
	} else {
		good := waitHit(&objs, slotRawTP, func() { unix.Getppid() })
		l.Close()
		cs = append(cs, triggered("raw_tp", good, "raw_tp/sys_enter attached and fired"))
	}

	if l, err := link.AttachTracing(link.TracingOptions{Program: objs.ProbeTpBtf}); err != nil {
		cs = append(cs, fail("tp_btf", Unsupported, err, ""))
	} else {
		good := waitHit(&objs, slotTPBTF, func() { unix.Getppid() })
		l.Close()
		cs = append(cs, triggered("tp_btf", good, "tp_btf/sys_enter attached and fired"))
	}

	cs = append(cs, uprobeCheck(&objs))
	cs = append(cs, netChecks(&objs)...)
	cs = append(cs, syscallChecks(&objs)...)
	cs = append(cs, structOpsCheck())
	cs = append(cs, kprobeCheck(), fentryCheck())
	return cs
}

func triggered(name string, good bool, detail string) Check {
	if good {
		return ok(name, detail)
	}
	return fail(name, Unsupported, errors.New("attached but never fired"), "")
}

func uprobeCheck(objs *probesObjects) Check {
	exe, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return fail("uprobe", Unsupported, err, "")
	}
	// Test binaries carry no symbol table: fall back to the function's
	// file offset, found through /proc/self/maps.
	var opts *link.UprobeOptions
	if off, err := selfFileOffset(reflect.ValueOf(uprobeTarget).Pointer()); err == nil {
		opts = &link.UprobeOptions{Address: off}
	}
	l, err := exe.Uprobe("github.com/cistern-ebpf/cistern/doctor.uprobeTarget", objs.ProbeUprobe, opts)
	if err != nil {
		return fail("uprobe", Unsupported, err, "")
	}
	defer l.Close()
	good := waitHit(objs, slotUprobe, func() { uprobeTarget(3) })
	return triggered("uprobe", good, "uprobe on this binary attached and fired (uprobes on libssl work the same way)")
}

// netChecks attach XDP (generic and native) and TCX to a veth inside a
// throwaway namespace pair and send a UDP packet through it.
func netChecks(objs *probesObjects) []Check {
	names := []string{"xdp_generic", "xdp_native", "tcx"}
	pair, err := netenv.NewPair(fmt.Sprintf("dr%d", os.Getpid()%100000), netenv.Options{Subnet: 250})
	if err != nil {
		var cs []Check
		for _, n := range names {
			cs = append(cs, fail(n, Missing, err, "run as root with iproute2 (netns and veth)"))
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
	attachXDP := func(name string, flags link.XDPAttachFlags, mode string) Check {
		before := hit(objs, slotXDP)
		var l link.Link
		err := netenv.Do(pair.ServerNS, func() (err error) {
			l, err = link.AttachXDP(link.XDPOptions{Program: objs.ProbeXdp, Interface: pair.ServerIfindex, Flags: flags})
			return err
		})
		if err != nil {
			return fail(name, Unsupported, err, "")
		}
		defer l.Close()
		for i := 0; i < 50 && hit(objs, slotXDP) == before; i++ {
			send()
			time.Sleep(10 * time.Millisecond)
		}
		return triggered(name, hit(objs, slotXDP) > before, mode+" XDP on veth in a throwaway netns saw packets")
	}
	cs := []Check{
		attachXDP("xdp_generic", link.XDPGenericMode, "generic"),
		attachXDP("xdp_native", link.XDPDriverMode, "native"),
	}
	// Native XDP is an accelerator, not a requirement: generic always works.
	cs[1].Core = false

	var l link.Link
	err = netenv.Do(pair.ServerNS, func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Program: objs.ProbeTcx, Interface: pair.ServerIfindex, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err != nil {
		cs = append(cs, fail("tcx", Unsupported, err, "Linux 6.6 or newer"))
	} else {
		good := false
		for i := 0; i < 50 && !good; i++ {
			send()
			time.Sleep(10 * time.Millisecond)
			good = hit(objs, slotTCX) > 0
		}
		l.Close()
		cs = append(cs, triggered("tcx", good, "TCX ingress on veth saw packets"))
	}
	return cs
}

func syscallChecks(objs *probesObjects) []Check {
	var cs []Check
	rd, err := ringbuf.NewReader(objs.Ring)
	if err != nil {
		return []Check{fail("ringbuf", Unsupported, err, "")}
	}
	defer rd.Close()

	args := probesProbeArgs{Cookie: 0xC15 << 20}
	ret, err := objs.ProbeSyscall.Run(&ebpf.RunOptions{Context: args})
	if err != nil {
		cs = append(cs, fail("syscall_test_run", Unsupported, err, ""))
	} else {
		cs = append(cs, triggered("syscall_test_run", hit(objs, slotSyscall) == 1, "BPF_PROG_TEST_RUN of a SYSCALL program"))
	}
	rd.SetDeadline(time.Now().Add(time.Second))
	rec, rerr := rd.Read()
	switch {
	case err != nil || ret != 0:
		cs = append(cs, fail("ringbuf", Unsupported, fmt.Errorf("reserve failed (ret %d, %v)", ret, err), ""))
	case rerr != nil:
		cs = append(cs, fail("ringbuf", Unsupported, rerr, ""))
	case len(rec.RawSample) == 8 && binary.NativeEndian.Uint64(rec.RawSample) == args.Cookie:
		cs = append(cs, ok("ringbuf", "record reserved in the kernel and read back"))
	default:
		cs = append(cs, fail("ringbuf", Unsupported, errors.New("record corrupted"), ""))
	}

	// mmapable array: the counter seen through mmap equals the one from lookup.
	if mem, err := objs.Hits.Memory(); err != nil {
		cs = append(cs, fail("mmap_array", Unsupported, err, ""))
	} else {
		var b [8]byte
		_, _ = mem.ReadAt(b[:], slotSyscall*8)
		cs = append(cs, triggered("mmap_array", binary.NativeEndian.Uint64(b[:]) == hit(objs, slotSyscall), "BPF_F_MMAPABLE array read through mmap"))
	}

	if ret, err := objs.ProbeTimer.Run(&ebpf.RunOptions{}); err != nil || ret != 0 {
		cs = append(cs, fail("bpf_timer", Unsupported, fmt.Errorf("arm timer: ret %d, %v", ret, err), ""))
	} else {
		good := waitHit(objs, slotTimer, func() {})
		cs = append(cs, triggered("bpf_timer", good, "bpf_timer armed from a SYSCALL program fired"))
	}
	return cs
}

func structOpsCheck() Check {
	var objs structopsObjects
	if err := loadStructopsObjects(&objs, nil); err != nil {
		c := fail("struct_ops", Unsupported, err, "")
		c.Core = false
		return c
	}
	defer objs.Close()
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: objs.CisternProbeCc})
	if err != nil {
		c := fail("struct_ops", Unsupported, err, "")
		c.Core = false
		return c
	}
	defer l.Close()
	avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	c := triggered("struct_ops", strings.Contains(string(avail), "cistern_probe"),
		"tcp_congestion_ops registered through a struct_ops link")
	c.Core = false
	return c
}

// kprobe and fentry are expected to fail on this class of kernel; Cistern
// never depends on them. They are probed with minimal hand-built programs.
func kprobeCheck() Check {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err == nil {
		defer prog.Close()
		var l link.Link
		if l, err = link.Kprobe("do_sys_openat2", prog, nil); err == nil {
			l.Close()
			return Check{Name: "kprobe", Status: OK, Detail: "kprobes attach (Cistern does not need them)"}
		}
	}
	return Check{Name: "kprobe", Status: Unsupported, Detail: firstLine(err) +
		": kprobes are unavailable (CONFIG_KPROBES off); Cistern uses tracepoints, tp_btf and uprobes instead"}
}

func fentryCheck() Check {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: "do_sys_openat2", License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err == nil {
		defer prog.Close()
		var l link.Link
		if l, err = link.AttachTracing(link.TracingOptions{Program: prog}); err == nil {
			l.Close()
			return Check{Name: "fentry", Status: OK, Detail: "fentry attaches (Cistern does not need it)"}
		}
	}
	return Check{Name: "fentry", Status: Unsupported, Detail: firstLine(err) +
		": fentry/fexit/fmod_ret/LSM are refused here; Cistern uses tracepoints, tp_btf and uprobes instead"}
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
