// Package capture is Cistern's query-capture agent: uprobes on libssl's
// SSL_write/SSL_read (bpf/capture/tls.bpf.c) feed a target process's TLS
// plaintext to the accumulating channel (package accum), or syscall
// tracepoints on write/read/sendto/recvfrom/sendmsg/recvmsg of its TCP/UDP
// sockets (bpf/capture/plain.bpf.c) feed its unencrypted traffic, and a
// protocol parser (PostgreSQL, or MySQL/MariaDB) turns the reassembled
// streams into query records.
package capture

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/accum"
)

// Protocol tags (the record's proto byte).
const (
	ProtoPostgres uint8 = 1
	ProtoMySQL    uint8 = 2
	ProtoRaw      uint8 = 3
)

// Transports of Options.Transport: a filter on what is captured. Every
// capture attaches the socket tracepoints (they also tell TLS sockets from
// plaintext ones and give TLS connections their addresses).
const (
	TransportBoth  = "both"  // TLS plaintext and plaintext sockets (default)
	TransportTLS   = "tls"   // uprobes on libssl and Go crypto/tls only
	TransportPlain = "plain" // socket syscalls of plaintext TCP/UDP connections only
)

// DefaultRingSize is the capture's ring (Options.Accum.RingSize 0): it has
// to hold what TLS calls write in one go (a PostgreSQL backend hands
// SSL_write a whole 1 MiB row, which one uprobe turns into 1 MiB of records
// at once) on every CPU while the pump wakes up. 1 MiB lost a third of the
// churn benchmark's bytes; 8 MiB lost none.
const DefaultRingSize = 8 << 20

// Sides of Options.Side and Query.Side.
const (
	SideClient = "client"
	SideServer = "server"
)

// Options of Open.
type Options struct {
	// What is captured: exactly one of PID (with Children: and every
	// process it has forked or forks), Cgroup (a cgroup-v2 directory and
	// its descendants) or All.
	PID       int
	Children  bool
	Cgroup    string
	All       bool
	Protocol  string       // "postgres" (default) or "mysql" (MySQL and MariaDB)
	Transport string       // TransportBoth (default), TransportTLS or TransportPlain
	Side      string       // SideClient, SideServer, or "" for both
	Accum     accum.Config // channel sizes (zero: defaults)
	// Pump: the ring is drained by a goroutine of its own at a raised
	// priority into a queue Next reads (accum.Reader.Pump).
	Pump accum.PumpOptions
	// HoldNew: a selected process that executes a file, or opens a
	// libssl, not attached yet is stopped in the kernel until its uprobes
	// are attached, HoldMax at most (0: DefaultHoldMax).
	HoldNew bool
	HoldMax time.Duration

	// pollOnly: no attachment on exec and library load, only the /proc
	// rescans (tests: the connections missed must be counted as unread).
	pollOnly bool
	// keepHeld: the agent never continues a held process itself (tests of
	// the hold timer and the watchdog).
	keepHeld bool
}

// Capture is a loaded, attached capture.
type Capture struct {
	Opt    Options
	LibSSL string // the libssl files attached to, as seen from here
	Reader *accum.Reader
	objs   *capObjects
	stats  *ebpf.Map
	links  []link.Link
	// The syscall tracepoints' programs, whose runs the kernel skipped
	// are counted in their recursion misses (SkippedEvents). Set by
	// open, read-only after.
	tpProgs []*ebpf.Program
	// preemptOff: the socket-call programs hold preemption off (7.x;
	// preempt.go). Set by open.
	preemptOff bool
	// rawPath: the socket calls are traced at the raw syscall
	// tracepoints (7.x; syscalls.go), not the per-call ones. Set by open.
	rawPath bool
	conns   map[uint64]*connState
	// Agent counters, atomic: Counters reads them from another goroutine.
	nQueries, nGaps, nBad atomic.Uint64
	cgroup                Cgroup
	out                   []Query   // Next's result, reused
	san                   Sanitizer // fingerprints (Next)
	clock                 int64     // wall minus monotonic, ns

	// What rescan needs to attach libraries and Go binaries found later.
	uprobeOpts         *link.UprobeOptions
	multi              bool             // uprobe_multi links (uprobes.go)
	libs               map[libFile]bool // attached (or failed: not retried)
	mapSeen            map[string]bool  // "dev inode" of mappings scanObjects looked at
	pidSeen            map[int]time.Time
	lastScan, lastFull time.Time
	rescanGap          time.Duration // between passes (rescan), rescanEvery backing off
	rescanEvents       uint64        // nCtlEvents at the last pass
	nLibs, nLibErrors  atomic.Uint64
	nGoBins            atomic.Uint64
	goBins             map[libFile]bool // Go executables looked at
	lastErr            atomic.Value     // string: the last attach error

	// Attachment on exec and library load (attach.go): mu guards the
	// attach state above (libs, goBins, links, LibSSL) and the caches,
	// shared by the control goroutine and rescan.
	mu                        sync.Mutex
	closing                   bool               // Close has begun: attach nothing more
	goCache                   map[string]*goTLS  // build id -> offsets (nil: not Go with crypto/tls)
	sslCache                  map[string]*sslObj // build id -> offsets (nil: no TLS library)
	rustls                    map[libFile]string // executable -> UnreadRustls or "" (tlsStack)
	ctl                       *ringbuf.Reader
	ctlDone                   chan struct{}
	holdStop, holdDone        chan struct{}
	holdKick                  chan struct{} // a control event came (holdTimer)
	wd                        *watchdog
	nCtlEvents, nHoldTimeouts atomic.Uint64
	nSupervisors              atomic.Uint64 // parents continued after passing a hold on (continueSupervisors)
	nUnread                   atomic.Uint64
	unreadMu                  sync.Mutex
	unread                    []Query
	unreadWake                chan struct{}
	samplesMu                 sync.Mutex
	samples                   []AttachSample
}

// FindLibSSL returns the libssl.so.3 mapped by pid, as a path reachable from
// this mount namespace (through /proc/PID/root).
func FindLibSSL(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		p := fields[5]
		if strings.HasPrefix(filepath.Base(p), "libssl.so.3") {
			return fmt.Sprintf("/proc/%d/root%s", pid, p), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("process %d has no libssl.so.3 mapped (not a TLS client or server, or statically linked)", pid)
}

// Open loads the capture programs and attaches them for the selection in
// opt: the socket tracepoints always, and (unless opt.Transport is plain)
// uprobes on every libssl.so.3 the selected processes map and on the
// crypto/tls functions of every Go binary they run; rescans from Next
// attach to libraries and binaries that appear later.
func Open(opt Options) (*Capture, error) {
	if opt.Protocol == "" {
		opt.Protocol = "postgres"
	}
	if opt.Protocol != "postgres" && opt.Protocol != "mysql" && opt.Protocol != "raw" {
		return nil, fmt.Errorf("protocol %q: want postgres, mysql or raw", opt.Protocol)
	}
	if err := opt.validate(); err != nil {
		return nil, err
	}
	if opt.Transport == "" {
		opt.Transport = TransportBoth
	}
	if opt.Accum.RingSize == 0 {
		opt.Accum.RingSize = DefaultRingSize
	}
	switch opt.Transport {
	case TransportBoth, TransportTLS, TransportPlain:
	default:
		return nil, fmt.Errorf("transport %q: want both, tls or plain", opt.Transport)
	}
	if opt.Side != "" && opt.Side != SideClient && opt.Side != SideServer {
		return nil, fmt.Errorf("side %q: want client, server or both", opt.Side)
	}
	if opt.HoldMax <= 0 {
		opt.HoldMax = DefaultHoldMax
	}
	if opt.HoldNew && opt.Transport == TransportPlain {
		return nil, errors.New("holding new processes is for TLS attachment: not with transport plain")
	}
	c := &Capture{Opt: opt, conns: map[uint64]*connState{}, clock: clockOffset(),
		goCache: map[string]*goTLS{}, sslCache: map[string]*sslObj{}, rustls: map[libFile]string{}, unreadWake: make(chan struct{}, 1)}
	var err error
	if opt.Cgroup != "" {
		if c.cgroup, err = ResolveCgroup(opt.Cgroup); err != nil {
			return nil, err
		}
	}
	if err := c.open(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Capture) wantTLS() bool   { return c.Opt.Transport != TransportPlain }
func (c *Capture) wantPlain() bool { return c.Opt.Transport != TransportTLS }

func (c *Capture) open() error {
	opt := c.Opt
	var libs []string
	if c.wantTLS() {
		var err error
		if libs, err = c.libSSLs(); err != nil {
			return err
		}
	}
	spec, err := loadCap()
	if err != nil {
		return err
	}
	if err := c.Opt.Accum.Apply(spec); err != nil {
		return err
	}
	for name, v := range map[string]any{"cap_proto": c.protoTag(), "cap_want_tls": u8of(c.wantTLS()),
		"cap_want_plain": u8of(c.wantPlain()), "cap_hold": u8of(opt.HoldNew)} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	if err := c.setSelection(spec); err != nil {
		return err
	}
	c.multi = c.wantTLS() && useUprobeMulti()
	setUprobeMulti(spec, c.multi)
	var objs capObjects
	if err := c.load(spec, &objs); err != nil {
		return err
	}
	c.objs, c.stats = &objs, objs.AccumStats
	if err := accum.Start(&ebpf.Collection{Programs: map[string]*ebpf.Program{"accum_start": objs.AccumStart}}); err != nil {
		return err
	}
	if err := c.startSelection(objs.CapPids, objs.CapFork, objs.CapExitProc); err != nil {
		return err
	}
	if c.wantTLS() {
		// One process: the uprobes' own pid filter keeps every other process
		// from trapping. Otherwise every user of the library traps and
		// cap_selected decides.
		uo := &link.UprobeOptions{}
		if opt.perPID() {
			uo.PID = opt.PID
		}
		c.uprobeOpts, c.libs, c.pidSeen, c.goBins = uo, map[libFile]bool{}, map[int]time.Time{}, map[libFile]bool{}
		c.mapSeen = map[string]bool{}
		c.lastScan, c.lastFull = time.Now(), time.Now()
		// The control ring first: a process that starts while the
		// existing ones are looked at is announced.
		if err := c.startControl(); err != nil {
			return err
		}
		if opt.HoldNew {
			if c.wd, err = startWatchdog(objs.CapHeld, objs.CapSup, opt.HoldMax); err != nil {
				return err
			}
		}
		if !opt.pollOnly {
			if err := c.attachEvents(); err != nil {
				return err
			}
		}
		c.mu.Lock()
		for _, lib := range libs {
			// A process that exited since libSSLs is no error: its
			// library, if still used, is found in another's maps.
			id, ok := libFileOf(lib)
			if !ok {
				continue
			}
			if _, _, err := c.lookSSL(lib, lib, id, true); err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					c.mu.Unlock()
					return err
				}
				c.nLibErrors.Add(1)
				c.lastErr.Store(err.Error())
			}
		}
		c.LibSSL = strings.Join(libs, ", ")
		c.mu.Unlock()
		pids, err := c.targets()
		if err != nil {
			return err
		}
		for _, pid := range pids {
			c.scanGo(pid)
			c.scanObjects(pid)
		}
		if opt.perPID() && opt.Transport == TransportTLS && c.nLibs.Load() == 0 && c.nGoBins.Load() == 0 {
			_, err := FindLibSSL(opt.PID)
			return fmt.Errorf("%w, carries no OpenSSL or BoringSSL of its own, and is no Go program with crypto/tls", err)
		}
	}
	// The uprobes come first: a TLS call that starts before the
	// tracepoints are attached cannot have its ciphertext taken for
	// plaintext then.
	if err := c.attachSyscalls(&objs); err != nil {
		return err
	}
	return c.newReader(objs.AccumRing)
}

// Via says what the capture is attached to, for messages.
func (c *Capture) Via() string {
	var parts []string
	if c.wantTLS() {
		lib := c.LibSSL
		if lib == "" {
			lib = "libssl.so.3 (none mapped yet: attached as processes map it)"
		}
		parts = append(parts, lib, "Go crypto/tls")
	}
	parts = append(parts, "socket syscalls")
	return strings.Join(parts, ", ")
}

func u8of(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// attachTLS puts the libssl uprobes on lib, at the offsets o gives, each
// with o's library as its cookie. Called with c.mu held.
func (c *Capture) attachTLS(lib string, o *sslObj) error {
	syms := o.syms
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		return err
	}
	objs, uo := c.objs, c.uprobeOpts
	var reqs []uprobeReq
	for _, a := range []struct {
		sym      string
		prog     *ebpf.Program
		ret      bool
		optional bool
	}{
		{"SSL_write", objs.CapSslWrite, false, false},
		{"SSL_write", objs.CapSslWriteRet, true, false},
		{"SSL_read", objs.CapSslRead, false, false},
		{"SSL_read", objs.CapSslReadRet, true, false},
		{"SSL_write_ex", objs.CapSslWriteEx, false, true},
		{"SSL_write_ex", objs.CapSslWriteRet, true, true},
		{"SSL_read_ex", objs.CapSslReadEx, false, true},
		{"SSL_read_ex", objs.CapSslReadRet, true, true},
		{"SSL_free", objs.CapSslFree, false, true},
		// The handshake's socket I/O marks the socket TLS before any
		// ciphertext could reach the plaintext parser.
		{"SSL_connect", objs.CapSslHandshake, false, true},
		{"SSL_connect", objs.CapSslHandshakeRet, true, true},
		{"SSL_accept", objs.CapSslHandshake, false, true},
		{"SSL_accept", objs.CapSslHandshakeRet, true, true},
		{"SSL_do_handshake", objs.CapSslHandshake, false, true},
		{"SSL_do_handshake", objs.CapSslHandshakeRet, true, true},
	} {
		off := syms[a.sym]
		if off == 0 {
			if a.optional {
				continue
			}
			return fmt.Errorf("attach %s (%s): %w", a.sym, lib, link.ErrNoSymbol)
		}
		reqs = append(reqs, uprobeReq{name: a.sym, sym: a.sym, prog: a.prog, addr: off, ret: a.ret, cookie: o.cookie()})
	}
	links, err := c.attachUprobes(ex, lib, reqs, uo.PID)
	if err != nil {
		return err
	}
	c.links = append(c.links, links...)
	return nil
}

func (c *Capture) protoTag() uint8 {
	switch c.Opt.Protocol {
	case "mysql":
		return ProtoMySQL
	case "raw":
		return ProtoRaw
	}
	return ProtoPostgres
}

// newReader reads the channel: the parser consumes each record's segments
// itself, so the Reassembler keeps only sequence numbers, not the bytes.
func (c *Capture) newReader(ring *ebpf.Map) (err error) {
	if c.Reader, err = accum.NewReader(ring); err != nil {
		return err
	}
	c.Reader.Streams.SeqOnly = true
	c.Reader.Pump(c.Opt.Pump)
	return nil
}

func clockOffset() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Now().UnixNano() - ts.Nano()
}

// Next waits up to timeout for channel records and returns the queries they
// completed (possibly none), in a slice the next call reuses.
// os.ErrDeadlineExceeded: nothing arrived.
func (c *Capture) Next(timeout time.Duration) ([]Query, error) {
	c.rescan()
	if out := c.takeUnread(c.out[:0]); len(out) > 0 {
		c.out = out
		return out, nil
	}
	gaps := len(c.Reader.Streams.Gaps)
	rec, err := c.Reader.Read(timeout)
	if err != nil {
		return nil, err
	}
	gap := len(c.Reader.Streams.Gaps) > gaps
	cs := c.conns[rec.ConnID]
	if cs == nil {
		cs = &connState{p: newParser(c.Opt.Protocol, rec.ConnID)}
		c.conns[rec.ConnID] = cs
	}
	if !cs.known {
		c.lookupConn(rec.ConnID, cs)
	}
	pc := cs.p
	if gap {
		pc.lost()
		c.nGaps.Add(1)
	}
	bad0 := pc.bad()
	out := c.out[:0]
	for _, seg := range rec.Segments {
		// A segment's bytes carry the times of its first and last fragment.
		ft := fragTimes{first: seg.FirstNS, last: seg.LastNS, opens: seg.FirstExact, closes: seg.LastExact}
		out = pc.feed(out, seg.Dir, seg.Data, ft, rec.PID)
	}
	if rec.Flags&accum.FlagClose != 0 {
		out = pc.close(out)
		delete(c.conns, rec.ConnID)
		c.Reader.Streams.Take(rec.ConnID)
		_ = c.objs.CapInfo.Delete(rec.ConnID) // read: the LRU need not keep it
	}
	c.nBad.Add(pc.bad() - bad0)
	side := pc.side()
	n := 0
	for i := range out {
		if c.Opt.Side != "" && side != c.Opt.Side {
			continue
		}
		q := &out[n]
		*q = out[i]
		q.Time = time.Unix(0, int64(q.startNS)+c.clock)
		q.TID, q.Side = rec.TID, side
		cs.fill(q)
		q.Fingerprint = c.san.Fingerprint(q.Protocol, q.Query)
		n++
	}
	out = out[:n]
	c.out = out
	c.nQueries.Add(uint64(len(out)))
	return out, nil
}

// ctlLost reads the control events the kernel had no room for.
func (c *Capture) ctlLost() uint64 {
	var n uint64
	if c.objs != nil {
		_ = c.objs.CapCtlLost.Lookup(uint32(0), &n)
	}
	return n
}

// unseen counts the socket calls whose end neither exit program saw
// (plain.bpf.h, SKIPPED RUNS).
func (c *Capture) unseen() uint64 {
	var n uint64
	if c.objs != nil {
		_ = c.objs.CapUnseen.Lookup(uint32(0), &n)
	}
	return n
}

// Unread counts TLS connections no probe read from their first TLS byte.
func (c *Capture) Unread() uint64 { return c.nUnread.Load() }

// HoldTimeouts counts processes --hold-new continued after HoldMax.
func (c *Capture) HoldTimeouts() uint64 { return c.nHoldTimeouts.Load() }

// Stats reads the channel's counters.
func (c *Capture) Stats() (accum.Stats, error) { return accum.ReadStats(c.stats) }

// SkippedEvents counts the system call events (socket calls, library
// opens) whose capture program the kernel did not run because a BPF
// program was marked running on the CPU (its recursion guard; the
// programs' recursion_misses). Before 7.0 the socket calls' per-call
// tracepoints run with preemption off and a task's system call cannot nest
// in another BPF program, so this stays 0; from 7.0 the raw tracepoints
// (syscalls.go) count the runs a preempted task made the kernel skip, of
// any system call, mostly before the socket-call test. The library-open
// tracepoints (perf's path) share the guard of every kprobe, tracepoint
// and bpf() map call, and a skipped open is left to the agent's rescans
// of the processes.
func (c *Capture) SkippedEvents() (uint64, error) {
	var n uint64
	for _, p := range c.tpProgs {
		s, err := p.Stats()
		if err != nil {
			return 0, fmt.Errorf("capture program stats: %w", err)
		}
		n += s.RecursionMisses
	}
	return n, nil
}

// BadBytes counts protocol bytes the parsers could not make sense of and
// skipped.
func (c *Capture) BadBytes() uint64 { return c.nBad.Load() }

// Counters are the channel's kernel counters and the agent's own (queries,
// sequence gaps, protocol bytes skipped), for
// internal/metrics. Safe to call while another goroutine runs Next.
func (c *Capture) Counters() (map[string]uint64, error) {
	st, err := c.Stats()
	if err != nil {
		return nil, err
	}
	skipped, err := c.SkippedEvents()
	if err != nil {
		return nil, err
	}
	return map[string]uint64{
		"queries": c.nQueries.Load(), "sequence_gaps": c.nGaps.Load(),
		"protocol_bytes_skipped": c.nBad.Load(),
		"records":                st.Records, "ring_bytes": st.RingBytes, "payload_bytes": st.PayloadBytes,
		"lost_records": st.LostRecords, "lost_bytes": st.LostBytes, "busy_drops": st.BusyDrops,
		"table_full_drops": st.NoConn, "faults": st.Faults, "timer_flushes": st.TimerFlushes,
		"syscall_events_skipped": skipped, "socket_calls_unseen": c.unseen(),
		"syscall_programs_preempt_off": b2u(c.preemptOff), "syscall_raw_tracepoints": b2u(c.rawPath),
		"libraries_attached": c.nLibs.Load(), "library_attach_errors": c.nLibErrors.Load(),
		"go_binaries_attached":   c.nGoBins.Load(),
		"tls_connections_unread": c.nUnread.Load(), "hold_timeouts": c.nHoldTimeouts.Load(),
		"hold_supervisors_continued": c.nSupervisors.Load(),
		"control_events":             c.nCtlEvents.Load(), "control_events_lost": c.ctlLost(),
	}, nil
}

// LastAttachError is the last library or Go binary the capture failed to
// attach to, and why ("" if none): library_attach_errors counts them.
func (c *Capture) LastAttachError() string {
	s, _ := c.lastErr.Load().(string)
	return s
}

// Gaps are the losses the reader saw (sequence gaps).
func (c *Capture) Gaps() []accum.Gap { return c.Reader.Streams.Gaps }

// Close detaches and unloads everything.
func (c *Capture) Close() error {
	if c.holdStop != nil {
		close(c.holdStop)
		<-c.holdDone
		c.holdStop = nil
	}
	c.mu.Lock()
	c.closing = true
	closeLinks(c.links)
	c.links = nil
	c.mu.Unlock()
	c.releaseAll() // after the detach: nothing is held from here on
	if c.ctl != nil {
		c.ctl.Close()
		<-c.ctlDone
		c.ctl = nil
	}
	if c.wd != nil {
		c.wd.stop()
		c.wd = nil
	}
	var err error
	if c.Reader != nil {
		err = c.Reader.Close()
	}
	if c.objs != nil {
		if e := c.objs.Close(); err == nil {
			err = e
		}
		c.objs = nil
	}
	return err
}
