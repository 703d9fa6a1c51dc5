// Package queryref is the hand-written eBPF + Go reference that `cistern
// bench query` holds the query compiler against: syscall latency joined
// from raw_syscalls sys_enter/sys_exit, Q1 (max latency per pid and
// syscall per window) and Q2 (every syscall's latency to a file).
package queryref

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -target bpfel -type qkey -type rec syscalls ../../bpf/querybench/syscalls.bpf.c

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/cistern-ebpf/cistern/query/sema"
)

// Query picks what the reference computes.
type Query int

const (
	Q1 Query = iota + 1 // max latency per (pid, syscall) per window
	Q2                  // every syscall's latency, one line each
)

// Config of a reference run.
type Config struct {
	Query    Query
	CgroupID uint64 // cgroup v2 id to trace; 0 traces every task
}

// Key is one Q1 group.
type Key struct {
	PID uint32
	NR  uint32
}

// Stats are the reference's kernel-side counters, summed over CPUs.
type Stats struct {
	Events  uint64 // syscalls aggregated (Q1) or recorded (Q2)
	Lost    uint64 // Q2 records the ring had no room for
	NoStart uint64 // entries the start table had no room for
	Full    uint64 // Q1 groups the max table had no room for
}

// Tracer is a loaded, attached reference.
type Tracer struct {
	cfg   Config
	objs  syscallsObjects
	links []link.Link
	rd    *ringbuf.Reader
	win   uint32
	// reported is what the previous Window returned from the map it
	// closed; that map is read again and cleared only at the next Window.
	reported map[Key]uint64
	late     uint64
}

// Open loads the reference and attaches it to raw_syscalls.
func Open(cfg Config) (*Tracer, error) {
	if cfg.Query != Q1 && cfg.Query != Q2 {
		return nil, fmt.Errorf("queryref: unknown query %d", cfg.Query)
	}
	spec, err := loadSyscalls()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["target_cgroup"].Set(cfg.CgroupID); err != nil {
		return nil, err
	}
	t := &Tracer{cfg: cfg}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		return nil, fmt.Errorf("queryref: load: %w", firstLine(err))
	}
	exit := t.objs.QbExitMax
	if cfg.Query == Q2 {
		exit = t.objs.QbExitRec
		if t.rd, err = ringbuf.NewReader(t.objs.Records); err != nil {
			t.Close()
			return nil, err
		}
	}
	// Exit first: a syscall whose entry is seen is then always finished.
	for _, a := range []struct {
		name string
		prog *ebpf.Program
	}{{"sys_exit", exit}, {"sys_enter", t.objs.QbEnter}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: a.name, Program: a.prog})
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("queryref: attach %s: %w", a.name, err)
		}
		t.links = append(t.links, l)
	}
	return t, nil
}

func firstLine(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%v", ve.Cause)
	}
	return err
}

// Close detaches and unloads the reference.
func (t *Tracer) Close() error {
	for _, l := range t.links {
		l.Close()
	}
	t.links = nil
	if t.rd != nil {
		t.rd.Close()
	}
	return t.objs.Close()
}

// Detach stops tracing but keeps the maps readable.
func (t *Tracer) Detach() {
	for i := len(t.links) - 1; i >= 0; i-- {
		t.links[i].Close()
	}
	t.links = nil
}

// grace is how long a program that read the old window index may still be
// updating the closed map: one syscall exit, microseconds; 2 ms is ample
// unless the program is preempted, and what it adds then is caught by the
// next Window.
const grace = 2 * time.Millisecond

// Window closes the current Q1 window and returns its per-key maxima (the
// maximum over CPUs). The closed map is read now and cleared at the next
// Window, just before it is reused: a maximum that landed in it after the
// read comes out with that next window (counted in Late), not lost.
func (t *Tracer) Window() (map[Key]uint64, error) {
	if t.cfg.Query != Q1 {
		return nil, errors.New("queryref: Window needs Q1")
	}
	closed, next := t.objs.Max0, t.objs.Max1
	if t.win&1 == 1 {
		closed, next = next, closed
	}
	out := map[Key]uint64{}
	// next held the window before this one: fold in what came after its
	// read, then empty it for the window about to open.
	prev, err := readMax(next)
	if err != nil {
		return nil, err
	}
	for k, m := range prev {
		if m > t.reported[k] {
			out[k] = m
			t.late++
		}
		if err := next.Delete(&syscallsQkey{Pid: k.PID, Nr: k.NR}); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, err
		}
	}
	t.win++
	if err := t.objs.Window.Set(t.win); err != nil {
		return nil, err
	}
	time.Sleep(grace)
	cur, err := readMax(closed)
	if err != nil {
		return nil, err
	}
	for k, m := range cur {
		out[k] = max(out[k], m)
	}
	t.reported = cur
	return out, nil
}

// Late is how many keys' maxima reached a window's map after it was read
// (reported with the next window).
func (t *Tracer) Late() uint64 { return t.late }

// readMax is a window map's per-key maximum over CPUs.
func readMax(m *ebpf.Map) (map[Key]uint64, error) {
	out := map[Key]uint64{}
	var (
		k    syscallsQkey
		vals []uint64
	)
	it := m.Iterate()
	for it.Next(&k, &vals) {
		var v uint64
		for _, x := range vals {
			v = max(v, x)
		}
		out[Key{k.Pid, k.Nr}] = v
	}
	return out, it.Err()
}

// Header is the first line of a Q2 file.
const Header = "pid,tid,syscall,latency_ns\n"

// Drain copies Q2 records to w as CSV lines until stop is closed and the
// ring is empty; it returns the number of lines written.
func (t *Tracer) Drain(w io.Writer, stop <-chan struct{}) (uint64, error) {
	if t.cfg.Query != Q2 {
		return 0, errors.New("queryref: Drain needs Q2")
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.WriteString(Header); err != nil {
		return 0, err
	}
	var (
		rec     ringbuf.Record
		n       uint64
		line    []byte
		stopped bool
	)
	for {
		t.rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
		err := t.rd.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if stopped {
				break
			}
			select {
			case <-stop:
				// One more pass: what was submitted before stop is read.
				stopped = true
			default:
			}
			continue
		}
		if err != nil {
			return n, err
		}
		if len(rec.RawSample) < int(unsafe.Sizeof(syscallsRec{})) {
			continue
		}
		r := (*syscallsRec)(unsafe.Pointer(&rec.RawSample[0]))
		line = strconv.AppendUint(line[:0], uint64(r.Pid), 10)
		line = append(line, ',')
		line = strconv.AppendUint(line, uint64(r.Tid), 10)
		line = append(line, ',')
		line = append(line, SyscallName(r.Nr)...)
		line = append(line, ',')
		line = strconv.AppendUint(line, r.LatencyNs, 10)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return n, err
		}
		n++
	}
	return n, bw.Flush()
}

// Stats sums the kernel-side counters over CPUs.
func (t *Tracer) Stats() (Stats, error) {
	var sum [4]uint64
	for i := range sum {
		var vals []uint64
		if err := t.objs.Counters.Lookup(uint32(i), &vals); err != nil {
			return Stats{}, err
		}
		for _, v := range vals {
			sum[i] += v
		}
	}
	return Stats{Events: sum[0], Lost: sum[1], NoStart: sum[2], Full: sum[3]}, nil
}

// SyscallName is nr's x86_64 name (the query schema's table), or
// "sys_<nr>" for numbers it lacks.
func SyscallName(nr uint32) string {
	if s, ok := sema.SyscallNames[uint64(nr)]; ok {
		return s
	}
	return "sys_" + strconv.FormatUint(uint64(nr), 10)
}

// SyscallNumber is the inverse of SyscallName.
func SyscallNumber(name string) (uint32, bool) {
	for nr, s := range sema.SyscallNames {
		if s == name {
			return uint32(nr), true
		}
	}
	if v, ok := strings.CutPrefix(name, "sys_"); ok {
		n, err := strconv.ParseUint(v, 10, 32)
		return uint32(n), err == nil
	}
	return 0, false
}
