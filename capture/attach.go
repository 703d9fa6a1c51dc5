package capture

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/accum"
)

// Attaching on exec and on library load (bpf/capture/attach.bpf.h): the
// kernel announces, on the control ring, each file a selected process
// executes or each libssl.so* it opens that the agent has not dealt with
// yet (cap_seen); the control goroutine attaches the uprobes at once and
// marks the file seen. What was learnt of a file is kept by its build id
// (Go's, or the GNU one), so another copy of a binary or library is
// attached without reading its symbols again. The /proc rescans of
// rescan() stay as a safety net (a full control ring, a kernel without the
// programs).
//
// --hold-new: the kernel stops the announcing process (SIGSTOP) and the
// control goroutine continues it (SIGCONT) once its file is attached, or
// after HoldMax (counted as hold_timeouts). A watchdog process continues
// every process still held if the agent exits or dies (watchdog.go).

// DefaultHoldMax is the longest a process is held by --hold-new.
const DefaultHoldMax = 200 * time.Millisecond

// Control events (CAP_EV_*) and unread flags (CAP_TLS_*).
const (
	evExec   = 1
	evLib    = 2
	evUnread = 3

	tlsProbed    = 1
	tlsUnseen    = 2
	tlsMidstream = 4
)

// Reasons of an unread record (Query.UnreadReason).
const (
	UnreadNoProbe     = "no_tls_probe" // no TLS probe ever read it
	UnreadStartMissed = "start_missed" // read, but not from its first TLS byte
	UnreadJava        = "java_tls"     // no probe: a JVM's JSSE
	UnreadRustls      = "rustls"       // no probe: a Rust program's rustls
)

// AttachSample is one file attached from a control event: how long from
// the kernel's event (exec, or the library's open) to the uprobes in place.
type AttachSample struct {
	Kind    string // "go", "openssl" (a libssl opened) or "openssl-static" (an executable's own)
	Latency time.Duration
	Cached  bool // the file's offsets came from the build-id cache
	Held    bool
}

// kernelFile is the kernel's identity of a file (cap_file).
type kernelFile = capCapFile

// userFile turns the kernel's dev_t (major << 20 | minor) into stat's.
func userFile(k kernelFile) libFile {
	return libFile{dev: unix.Mkdev(uint32(k.Dev>>20), uint32(k.Dev&0xfffff)), ino: k.Ino}
}

// buildID is the file's Go build id or GNU build id ("" if none): copies
// of one build share it.
func buildID(f *elf.File) string {
	for _, s := range []struct{ sec, kind string }{{".note.go.buildid", "go:"}, {".note.gnu.build-id", "gnu:"}} {
		sec := f.Section(s.sec)
		if sec == nil {
			continue
		}
		b, err := sec.Data()
		if err != nil || len(b) < 16 {
			continue
		}
		// An ELF note: namesz, descsz, type, name (padded to 4), desc.
		namesz := int(f.ByteOrder.Uint32(b[0:4]))
		descsz := int(f.ByteOrder.Uint32(b[4:8]))
		off := 12 + (namesz+3)&^3
		if off+descsz > len(b) || descsz == 0 {
			continue
		}
		return s.kind + hex.EncodeToString(b[off:off+descsz])
	}
	return ""
}

// sslSyms are the libssl functions the uprobes go on, by file offset.
type sslSyms map[string]uint64

var sslNames = []string{"SSL_write", "SSL_read", "SSL_write_ex", "SSL_read_ex", "SSL_free",
	"SSL_connect", "SSL_accept", "SSL_do_handshake"}

// sslOffsets finds (or takes from the build-id cache) the TLS library in
// the file at path (name: its name, for its kind and messages). errNoSSL:
// it carries none. Called with c.mu held.
func (c *Capture) sslOffsets(path, name string) (*sslObj, bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	id := buildID(f)
	if o, ok := c.sslCache[id]; ok && id != "" {
		if o == nil {
			return nil, true, fmt.Errorf("%s: %w", name, errNoSSL)
		}
		return o, true, nil
	}
	o, err := findSSLObj(f, name)
	if id != "" && (err == nil || errors.Is(err, errNoSSL)) {
		c.sslCache[id] = o // nil: no TLS library
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	return o, false, nil
}

// goOffsets is findGoTLS through the build-id cache. Called with c.mu held.
func (c *Capture) goOffsets(path string) (*goTLS, bool, error) {
	var id string
	if f, err := elf.Open(path); err == nil {
		id = buildID(f)
		f.Close()
	}
	if g, ok := c.goCache[id]; ok && id != "" {
		if g == nil {
			return nil, true, errNotGoTLS
		}
		return g, true, nil
	}
	g, err := findGoTLS(path)
	if id != "" && (err == nil || errors.Is(err, errNotGoTLS)) {
		c.goCache[id] = g // nil: not Go with crypto/tls
	}
	return g, false, err
}

// startControl reads the control ring in a goroutine of its own.
func (c *Capture) startControl() error {
	rd, err := ringbuf.NewReader(c.objs.CapCtl)
	if err != nil {
		return fmt.Errorf("control ring: %w", err)
	}
	c.ctl = rd
	c.ctlDone = make(chan struct{})
	if c.Opt.HoldNew {
		c.holdKick = make(chan struct{}, 1)
	}
	// File announcements (exec, libssl open) go to a worker of their own:
	// attaching reads whole executables (every new binary under --all),
	// and an unread connection's process must be looked at (tlsStack)
	// before it exits, not after the files queued ahead of it.
	files := make(chan capCapEv, 1024)
	filesDone := make(chan struct{})
	go func() {
		defer close(filesDone)
		c.controlThread()
		for ev := range files {
			c.onFile(&ev)
			c.kickHold()
		}
	}()
	go func() {
		defer close(c.ctlDone)
		defer func() { close(files); <-filesDone }()
		c.controlThread()
		var rec ringbuf.Record
		for {
			if err := rd.ReadInto(&rec); err != nil {
				return // closed
			}
			var ev capCapEv
			if len(rec.RawSample) < int(unsafe.Sizeof(ev)) {
				continue
			}
			ev = *(*capCapEv)(unsafe.Pointer(&rec.RawSample[0]))
			c.nCtlEvents.Add(1)
			switch ev.Type {
			case evExec, evLib:
				files <- ev
			case evUnread:
				c.onUnread(&ev)
				c.kickHold()
			}
		}
	}()
	if c.Opt.HoldNew {
		c.holdStop = make(chan struct{})
		c.holdDone = make(chan struct{})
		go c.holdTimer()
	}
	return nil
}

// controlThread locks the calling goroutine to a thread of its own at the
// pump's raised priority (accum.Pump): on a loaded machine the attachment
// waits for a CPU otherwise, and a client's first query wins the race (or
// a held process waits). The thread is discarded when the goroutine ends.
func (c *Capture) controlThread() {
	runtime.LockOSThread()
	nice := c.Opt.Pump.Nice
	if nice == 0 {
		nice = accum.DefaultPumpNice
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
}

// kickHold makes the hold timer tick fast for a while (holdTimer).
func (c *Capture) kickHold() {
	select {
	case c.holdKick <- struct{}{}:
	default:
	}
}

// onFile attaches the uprobes to the file of an exec or libssl open, marks
// it seen in the kernel, and continues the process if it was held.
func (c *Capture) onFile(ev *capCapEv) {
	id := userFile(ev.F)
	kind := "go"
	if ev.Type == evLib {
		kind = "openssl"
	}
	var paths []string
	evPath := cString(ev.Path[:])
	if ev.Type == evExec {
		paths = append(paths, fmt.Sprintf("/proc/%d/exe", ev.Pid))
	}
	if strings.HasPrefix(evPath, "/") {
		paths = append(paths, fmt.Sprintf("/proc/%d/root%s", ev.Pid, evPath), evPath)
	} else if evPath != "" {
		paths = append(paths, filepath.Join(fmt.Sprintf("/proc/%d/cwd", ev.Pid), evPath))
	}
	c.mu.Lock()
	attached, cached, dealt := false, false, false
	if c.closing {
		paths = nil
	}
	// The path whose file is the kernel's (device, inode); else the first
	// that exists: on overlayfs, stat shows the overlay's device, not the
	// one the kernel saw.
	path, pid := "", libFile{}
	for _, p := range paths {
		if got, ok := libFileOf(p); ok && (got == id || path == "") {
			path, pid = p, got
			if got == id {
				break
			}
		}
	}
	if path != "" {
		dealt = true
		var err error
		// Attached through an fd of our own: the path through /proc/PID
		// goes with the process, which may exit while the uprobes are put
		// in place (a uprobe resolves its path at each attach).
		at := path
		if f, ferr := os.Open(path); ferr == nil {
			defer f.Close()
			at = fmt.Sprintf("/proc/self/fd/%d", f.Fd())
		}
		if ev.Type == evExec {
			attached, cached, err = c.lookGo(at, pid)
			if !attached && err == nil { // OpenSSL or BoringSSL inside it (Node.js)?
				kind = LibOpenSSLStatic
				attached, cached, err = c.lookSSL(at, path, pid, false)
			}
		} else {
			attached, cached, err = c.lookSSL(at, path, pid, true)
		}
		if err != nil {
			c.nLibErrors.Add(1)
			c.lastErr.Store(err.Error())
		}
	}
	c.mu.Unlock()
	if dealt {
		_ = c.objs.CapSeen.Put(ev.F, uint8(1))
	}
	if attached {
		lat := time.Duration(monotonicNS() - int64(ev.Ts))
		c.samplesMu.Lock()
		if len(c.samples) < 1<<16 {
			c.samples = append(c.samples, AttachSample{Kind: kind, Latency: lat, Cached: cached, Held: ev.Held != 0})
		}
		c.samplesMu.Unlock()
	}
	if ev.Held != 0 && !c.Opt.keepHeld {
		c.release(ev.Pid, false)
	}
}

// lookGo attaches the Go TLS uprobes to the executable at path (file id)
// unless looked at before. Called with c.mu held.
func (c *Capture) lookGo(path string, id libFile) (attached, cached bool, err error) {
	if c.goBins[id] {
		return false, false, nil
	}
	c.goBins[id] = true // attached, not Go, or failed: not retried
	g, cached, err := c.goOffsets(path)
	if errors.Is(err, errNotGoTLS) {
		return false, cached, nil
	}
	if err == nil {
		err = c.attachGo(path, g)
	}
	if err != nil {
		return false, cached, err
	}
	c.nGoBins.Add(1)
	return true, cached, nil
}

// lookSSL attaches the libssl uprobes to the TLS library in the file at
// path (file id, name for its kind and messages) unless looked at before.
// must: a file without one is an error (a libssl.so), not a miss.
// Called with c.mu held.
func (c *Capture) lookSSL(path, name string, id libFile, must bool) (attached, cached bool, err error) {
	if c.libs[id] {
		return false, false, nil
	}
	c.libs[id] = true
	o, cached, err := c.sslOffsets(path, name)
	if !must && errors.Is(err, errNoSSL) {
		return false, cached, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		delete(c.libs, id) // its process exited: the file may be met again through another
	}
	if err == nil {
		err = c.attachTLS(path, o)
	}
	if err != nil {
		return false, cached, err
	}
	c.nLibs.Add(1)
	if c.LibSSL == "" {
		c.LibSSL = name
	}
	return true, cached, nil
}

// release continues held process pid if it is still held (the entry in
// cap_held is the token: whoever deletes it sends the SIGCONT).
func (c *Capture) release(pid uint32, timeout bool) {
	if err := c.objs.CapHeld.Delete(pid); err != nil {
		return
	}
	_ = unix.Kill(int(pid), unix.SIGCONT)
	if timeout {
		c.nHoldTimeouts.Add(1)
	}
}

// The hold timer's ticks: fast while a process is held or a control event
// came within HoldMax (every hold comes with one; a supervisor stops itself
// just after its child), slow otherwise: an idle agent with --hold-new
// woke 200 times a second for nothing (issue #34). The slow tick still
// finds a hold whose event the control ring had no room for.
const (
	holdTick     = 5 * time.Millisecond
	holdIdleTick = 100 * time.Millisecond
)

// holdTimer continues processes held longer than HoldMax, and supervisors
// whose held child was continued.
func (c *Capture) holdTimer() {
	defer close(c.holdDone)
	t := time.NewTimer(holdTick)
	defer t.Stop()
	busy := time.Now() // when something was last held or announced
	for {
		select {
		case <-c.holdStop:
			return
		case <-c.holdKick:
			busy = time.Now()
		case <-t.C:
		}
		now := monotonicNS()
		var pid uint32
		var since uint64
		var late []uint32
		held := 0
		it := c.objs.CapHeld.Iterate()
		for it.Next(&pid, &since) {
			held++
			if now-int64(since) > int64(c.Opt.HoldMax) {
				late = append(late, pid)
			}
		}
		for _, p := range late {
			c.release(p, true)
		}
		n := continueSupervisors(c.objs.CapSup, c.objs.CapHeld, func(uint32) bool { return true })
		c.nSupervisors.Add(uint64(n))
		if held > 0 || n > 0 {
			busy = time.Now()
		}
		next := holdTick
		if time.Since(busy) > c.Opt.HoldMax {
			next = holdIdleTick
		}
		t.Reset(next)
	}
}

// releaseAll continues every held process (at Close).
func (c *Capture) releaseAll() {
	if c.objs == nil || c.objs.CapHeld == nil {
		return
	}
	var pid uint32
	var since uint64
	var all []uint32
	it := c.objs.CapHeld.Iterate()
	for it.Next(&pid, &since) {
		all = append(all, pid)
	}
	for _, p := range all {
		c.release(p, false)
	}
	c.nSupervisors.Add(uint64(continueSupervisors(c.objs.CapSup, c.objs.CapHeld, nil)))
}

// onUnread queues the record of a TLS connection no probe read from its
// start.
func (c *Capture) onUnread(ev *capCapEv) {
	c.nUnread.Add(1)
	q := Query{
		Time: time.Unix(0, int64(ev.Ts)+c.clock), PID: ev.Pid, Comm: cString(ev.Comm[:]),
		Transport: TransportTLS, Library: "unknown", Protocol: c.Opt.Protocol, Error: "",
		Unread: true, UnreadReason: UnreadNoProbe, BytesSent: ev.Bytes[0], BytesReceived: ev.Bytes[1],
	}
	if ev.Flags&tlsProbed != 0 {
		q.UnreadReason = UnreadStartMissed
	} else if s := c.tlsStack(ev.Pid); s != "" {
		q.UnreadReason = s
	}
	if ev.A.Family != 0 {
		q.Local = sockAddr(ev.A.Family, ev.A.Laddr, ev.A.Lport)
		q.Remote = sockAddr(ev.A.Family, ev.A.Raddr, ev.A.Rport)
	}
	c.unreadMu.Lock()
	c.unread = append(c.unread, q)
	c.unreadMu.Unlock()
	select {
	case c.unreadWake <- struct{}{}:
	default:
	}
}

// takeUnread appends the queued unread records to out.
func (c *Capture) takeUnread(out []Query) []Query {
	c.unreadMu.Lock()
	defer c.unreadMu.Unlock()
	out = append(out, c.unread...) // no side: shown whatever --side says
	c.unread = c.unread[:0]
	return out
}

// AttachSamples are the exec-to-attached latencies measured so far.
func (c *Capture) AttachSamples() []AttachSample {
	c.samplesMu.Lock()
	defer c.samplesMu.Unlock()
	return append([]AttachSample(nil), c.samples...)
}

// attachEvents attaches the exec and libssl-open programs (after the
// watchdog is running: a held process must never outlive the agent held).
func (c *Capture) attachEvents() error {
	if c.Opt.HoldNew { // before anything is held
		l, err := link.AttachTracing(link.TracingOptions{Program: c.objs.CapSelfStop})
		if err != nil {
			return fmt.Errorf("attach the supervisors' stop watch (--hold-new): %w", err)
		}
		c.links = append(c.links, l)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: c.objs.CapExec})
	if err != nil {
		return fmt.Errorf("attach exec announcements: %w", err)
	}
	c.links = append(c.links, l)
	for _, a := range []struct {
		name string
		prog *ebpf.Program
	}{{"sys_exit_openat", c.objs.CapLibOpened}, {"sys_enter_openat", c.objs.CapLibOpen}} {
		l, err := link.Tracepoint("syscalls", a.name, a.prog, nil)
		if err != nil {
			return fmt.Errorf("attach library-open announcements (syscalls/%s): %w", a.name, err)
		}
		c.links = append(c.links, l)
		c.tpProgs = append(c.tpProgs, a.prog) // perf's path: skipped runs counted (SkippedEvents)
	}
	return nil
}

func monotonicNS() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// tlsStack names the TLS stack without probes that process pid uses, if
// known: UnreadJava when it maps libjvm.so, UnreadRustls when its
// executable carries rustls (its name in the symbols or, stripped, in the
// panic locations of .rodata); "" otherwise (or the process is gone).
// Called from the control ring's reader only (never the file worker).
func (c *Capture) tlsStack(pid uint32) string {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return ""
	}
	if bytes.Contains(maps, []byte("/libjvm.so\n")) {
		return UnreadJava
	}
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	id, ok := libFileOf(exe)
	if !ok {
		return ""
	}
	if r, ok := c.rustls[id]; ok {
		return r
	}
	r := ""
	if f, err := elf.Open(exe); err == nil {
		for _, name := range []string{".rodata", ".strtab"} {
			if sec := f.Section(name); sec != nil {
				if b, err := sec.Data(); err == nil && bytes.Contains(b, []byte("rustls")) {
					r = UnreadRustls
				}
			}
		}
		f.Close()
	}
	c.rustls[id] = r
	return r
}
