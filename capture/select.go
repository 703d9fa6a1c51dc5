package capture

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/cistern-ebpf/cistern/internal/mounts"
)

// Selection modes (cap_mode in bpf/capture/select.bpf.h).
const (
	selPIDs   uint8 = 0
	selCgroup uint8 = 1
	selAll    uint8 = 2
)

// validate checks that exactly one selection is given.
func (o *Options) validate() error {
	n := 0
	if o.PID != 0 {
		n++
		if o.PID < 0 {
			return fmt.Errorf("pid %d: want a process id", o.PID)
		}
	}
	if o.Cgroup != "" {
		n++
	}
	if o.All {
		n++
	}
	if n != 1 {
		return errors.New("want exactly one of a pid, a cgroup or all processes")
	}
	if o.Children && o.PID == 0 {
		return errors.New("following children needs a pid")
	}
	return nil
}

// perPID: one process, whose uprobes can carry the kernel's own pid filter.
func (o *Options) perPID() bool { return o.PID != 0 && !o.Children }

// Cgroup is a cgroup-v2 directory as the BPF check needs it.
type Cgroup struct {
	Path  string // absolute, under the cgroup2 mount
	ID    uint64 // its inode number: the kernel's cgroup id
	Level int    // depth below the root (the root is 0)
}

// ResolveCgroup finds path in the cgroup-v2 hierarchy: an absolute path
// under its mount, or a path relative to the mount (with or without a
// leading /, as /proc/PID/cgroup shows it).
func ResolveCgroup(path string) (Cgroup, error) {
	roots := mounts.MountPoints("cgroup2")
	if len(roots) == 0 {
		return Cgroup{}, errors.New("no cgroup v2 hierarchy is mounted")
	}
	root := roots[0]
	abs := filepath.Clean(path)
	if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") || !filepath.IsAbs(abs) {
		abs = filepath.Join(root, path)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return Cgroup{}, fmt.Errorf("cgroup %s: %w", path, err)
	}
	if !st.IsDir() || !fileExists(filepath.Join(abs, "cgroup.procs")) {
		return Cgroup{}, fmt.Errorf("cgroup %s: %s is not a cgroup-v2 directory", path, abs)
	}
	rel, _ := filepath.Rel(root, abs)
	level := 0
	if rel != "." {
		level = len(strings.Split(rel, string(filepath.Separator)))
	}
	return Cgroup{Path: abs, ID: st.Sys().(*syscall.Stat_t).Ino, Level: level}, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// CgroupPIDs lists the processes in cg and its descendants.
func CgroupPIDs(cg string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == cg {
				return err
			}
			return nil // a child cgroup removed meanwhile
		}
		if d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids, err
}

// AllPIDs lists every process.
func AllPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// Descendants lists pid and every process below it in the process tree.
func Descendants(pid int) []int {
	children := map[int][]int{}
	for _, p := range AllPIDs() {
		if pp := ppid(p); pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// targets are the processes selected now (the BPF check also sees later ones).
func (c *Capture) targets() ([]int, error) {
	switch {
	case c.Opt.All:
		return AllPIDs(), nil
	case c.Opt.Cgroup != "":
		return CgroupPIDs(c.cgroup.Path)
	case c.Opt.Children:
		return Descendants(c.Opt.PID), nil
	}
	return []int{c.Opt.PID}, nil
}

// libFile identifies a library file whatever path it is reached by.
type libFile struct{ dev, ino uint64 }

func libFileOf(path string) (libFile, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return libFile{}, false
	}
	sys := st.Sys().(*syscall.Stat_t)
	return libFile{sys.Dev, sys.Ino}, true
}

// libSSLs are the distinct libssl.so.3 files the selected processes map.
func (c *Capture) libSSLs() ([]string, error) {
	pids, err := c.targets()
	if err != nil {
		return nil, err
	}
	seen := map[libFile]bool{}
	var libs []string
	for _, pid := range pids {
		lib, err := FindLibSSL(pid)
		if err != nil {
			continue
		}
		if id, ok := libFileOf(lib); ok && !seen[id] {
			seen[id] = true
			libs = append(libs, lib)
		}
	}
	return libs, nil
}

// Library rescans: uprobes follow a library file, so every process mapping
// an attached libssl is traced from its start; only another copy of the
// library (a container image, a bundled build) needs a new attachment. A
// process is looked at while it is young (the loader maps libraries just
// after exec, a dlopen may come later) and again on each full pass. While
// no selected process is young, no control event came (exec and libssl
// opens are announced, docs/capture.md "attach on exec") and a pass
// attached nothing, the passes back off from rescanEvery to rescanMaxGap:
// an idle agent paid a walk of /proc four times a second (issue #34).
const (
	rescanEvery   = 250 * time.Millisecond
	rescanMaxGap  = 2 * time.Second
	rescanYoung   = 2 * time.Second
	rescanFullGap = 5 * time.Second
)

// rescan attaches the uprobes to any libssl.so.3 or other file carrying
// OpenSSL or BoringSSL a selected process maps, and to any Go executable
// with crypto/tls it runs, that is not attached yet (TLS wanted, not a single process).
func (c *Capture) rescan() {
	now := time.Now()
	if c.uprobeOpts == nil || c.Opt.perPID() || now.Sub(c.lastScan) < max(c.rescanGap, rescanEvery) {
		return
	}
	c.lastScan = now
	full := now.Sub(c.lastFull) >= rescanFullGap
	if full {
		c.lastFull = now
	}
	pids, err := c.targets()
	if err != nil {
		return
	}
	attached := c.nLibs.Load() + c.nGoBins.Load()
	young := false
	alive := make(map[int]time.Time, len(pids))
	for _, pid := range pids {
		first, ok := c.pidSeen[pid]
		if !ok {
			first = now
		}
		alive[pid] = first
		if !full && ok && now.Sub(first) > rescanYoung {
			continue
		}
		young = young || now.Sub(first) <= rescanYoung
		c.scanGo(pid)
		c.scanObjects(pid)
	}
	c.pidSeen = alive // forget the processes that are gone
	events := c.nCtlEvents.Load()
	if young || events != c.rescanEvents || c.nLibs.Load()+c.nGoBins.Load() != attached {
		c.rescanGap = rescanEvery
	} else {
		c.rescanGap = min(2*max(c.rescanGap, rescanEvery), rescanMaxGap)
	}
	c.rescanEvents = events
}

// setSelection writes the selection into the spec's frozen .rodata.
func (c *Capture) setSelection(spec *ebpf.CollectionSpec) error {
	mode := selPIDs
	var cgid uint64
	var level uint32
	switch {
	case c.Opt.All:
		mode = selAll
	case c.Opt.Cgroup != "":
		mode, cgid, level = selCgroup, c.cgroup.ID, uint32(c.cgroup.Level)
	}
	self := uint32(os.Getpid())
	for name, v := range map[string]any{"cap_mode": mode, "cap_cgid": cgid, "cap_cglevel": level, "cap_self": self} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}

// startSelection follows forks (attached first, so that no fork between
// the scan and the attachment is missed) and fills cap_pids with the
// processes selected now.
func (c *Capture) startSelection(pids *ebpf.Map, fork, exit *ebpf.Program) error {
	progs := []*ebpf.Program{exit} // every mode: an exiting process's connections end
	if c.Opt.Children {
		progs = append(progs, fork)
	}
	for _, p := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach process fork/exit tracking: %w", err)
		}
		c.links = append(c.links, l)
	}
	if c.Opt.PID == 0 {
		return nil
	}
	targets, err := c.targets()
	if err != nil {
		return err
	}
	for _, p := range targets {
		if err := pids.Put(uint32(p), uint8(1)); err != nil {
			return fmt.Errorf("select pid %d: %w", p, err)
		}
	}
	return nil
}

// Selection says what is captured.
func (c *Capture) Selection() string { return c.Opt.selectionString() }

// selectionString says what is captured, for messages.
func (o *Options) selectionString() string {
	switch {
	case o.All:
		return "all processes"
	case o.Cgroup != "":
		return "cgroup " + o.Cgroup
	case o.Children:
		return fmt.Sprintf("pid %d and its children", o.PID)
	}
	return fmt.Sprintf("pid %d", o.PID)
}

// scanObjects attaches the libssl uprobes to every file mapped executable by
// pid that carries a TLS library (libssl.so, or OpenSSL or BoringSSL linked
// into the executable or another object) and was not looked at yet. A file
// is known by the device and inode its mapping shows, so a later pass pays
// no stat for it.
func (c *Capture) scanObjects(pid int) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		key := fields[3] + " " + fields[4]
		if c.mapSeen[key] {
			continue
		}
		c.mapSeen[key] = true
		path := fmt.Sprintf("/proc/%d/root%s", pid, fields[5])
		id, ok := libFileOf(path)
		if !ok {
			delete(c.mapSeen, key) // gone, or not reachable yet: next pass
			continue
		}
		must := strings.HasPrefix(filepath.Base(fields[5]), "libssl.so")
		c.mu.Lock()
		if !c.closing {
			if _, _, err := c.lookSSL(path, fields[5], id, must); errors.Is(err, fs.ErrNotExist) {
				delete(c.mapSeen, key) // the process exited: the next pass, through another
			} else if err != nil {
				c.nLibErrors.Add(1)
				c.lastErr.Store(err.Error())
			}
		}
		c.mu.Unlock()
	}
}
