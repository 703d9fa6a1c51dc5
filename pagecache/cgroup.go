package pagecache

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// v1MemoryRoot is where the agent mounts the cgroup-v1 memory controller
// when no memory controller is mounted at all.
const v1MemoryRoot = "/sys/fs/cgroup/memory"

// Cgroup is one memory cgroup, v1 (memory controller) or v2.
type Cgroup struct {
	Path    string // directory in the cgroup filesystem
	V2      bool
	ID      uint64 // kernfs id (the directory's inode number)
	created bool
	mounted string // mount point the agent made, to unmount at Close
	usage   *os.File
}

// memoryRoot finds the root of a hierarchy with the memory controller:
// cgroup v1's memory mount, else cgroup v2 if it offers memory.
func memoryRoot() (root string, v2 bool) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "", false
	}
	defer f.Close()
	var v2root string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 {
			continue
		}
		if fs[2] == "cgroup" && hasOpt(fs[3], "memory") {
			return fs[1], false
		}
		if fs[2] == "cgroup2" && v2root == "" {
			if b, err := os.ReadFile(filepath.Join(fs[1], "cgroup.controllers")); err == nil && hasOpt(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", ","), "memory") {
				v2root = fs[1]
			}
		}
	}
	return v2root, v2root != ""
}

func hasOpt(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}

// OpenCgroup opens the memory cgroup path: absolute inside a mounted
// cgroup filesystem, or relative to the memory hierarchy's root. With
// limit > 0 it creates the cgroup (it must not exist) with that limit, and
// Close removes it. Without a memory hierarchy it mounts cgroup v1's memory
// controller (unmounted at Close).
func OpenCgroup(path string, limit int64) (*Cgroup, error) {
	cg := &Cgroup{}
	root, v2 := memoryRoot()
	if root == "" {
		if err := os.MkdirAll(v1MemoryRoot, 0o755); err != nil {
			return nil, fmt.Errorf("no memory cgroup controller mounted and cannot create %s: %w", v1MemoryRoot, err)
		}
		if err := unix.Mount("cgroup", v1MemoryRoot, "cgroup", 0, "memory"); err != nil {
			return nil, fmt.Errorf("mount the memory cgroup controller at %s: %w", v1MemoryRoot, err)
		}
		root, cg.mounted = v1MemoryRoot, v1MemoryRoot
	}
	cg.V2 = v2
	if filepath.IsAbs(path) && strings.HasPrefix(filepath.Clean(path)+"/", filepath.Clean(root)+"/") {
		cg.Path = filepath.Clean(path)
	} else {
		cg.Path = filepath.Join(root, strings.TrimPrefix(path, "/"))
	}
	if cg.Path == filepath.Clean(root) {
		cg.Close()
		return nil, fmt.Errorf("cgroup %s is the root of the hierarchy: name a child cgroup", path)
	}
	if limit > 0 {
		if v2 {
			if err := enableMemory(root, filepath.Dir(cg.Path)); err != nil {
				cg.Close()
				return nil, err
			}
		}
		if err := os.Mkdir(cg.Path, 0o755); err != nil {
			cg.Close()
			if errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("cgroup %s exists: --limit creates a new cgroup (drop --limit to use it as it is)", cg.Path)
			}
			return nil, fmt.Errorf("create cgroup %s: %w", cg.Path, err)
		}
		cg.created = true
		if err := os.WriteFile(filepath.Join(cg.Path, cg.file("limit")), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
			cg.Close()
			return nil, fmt.Errorf("set the limit of %s: %w", cg.Path, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(cg.Path, &st); err != nil {
		cg.Close()
		return nil, fmt.Errorf("cgroup %s: %w", cg.Path, err)
	}
	cg.ID = st.Ino
	u, err := os.Open(filepath.Join(cg.Path, cg.file("usage")))
	if err != nil {
		cg.Close()
		return nil, fmt.Errorf("cgroup %s has no memory controller: %w", cg.Path, err)
	}
	cg.usage = u
	return cg, nil
}

// enableMemory turns the memory controller on for the children of every
// cgroup from root down to parent. systemd does this at boot; a machine or
// container without it (the kernel matrix's guests, for one) leaves it off,
// and a new child then has no memory.max to write.
func enableMemory(root, parent string) error {
	rel, err := filepath.Rel(root, parent)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil
	}
	dir := root
	for _, part := range append([]string{""}, strings.Split(rel, "/")...) {
		if part != "" && part != "." {
			dir = filepath.Join(dir, part)
		}
		ctl := filepath.Join(dir, "cgroup.subtree_control")
		b, err := os.ReadFile(ctl)
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		if hasOpt(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", ","), "memory") {
			continue
		}
		if err := os.WriteFile(ctl, []byte("+memory"), 0); err != nil {
			return fmt.Errorf("enable the memory controller for the children of %s: %w", dir, err)
		}
	}
	return nil
}

func (cg *Cgroup) file(what string) string {
	switch {
	case what == "limit" && cg.V2:
		return "memory.max"
	case what == "limit":
		return "memory.limit_in_bytes"
	case what == "usage" && cg.V2:
		return "memory.current"
	case what == "usage":
		return "memory.usage_in_bytes"
	case cg.V2:
		return "cgroup.procs"
	default:
		return "tasks"
	}
}

// Usage is the memory charged to the cgroup (what its limit applies to).
func (cg *Cgroup) Usage() (int64, error) {
	var b [32]byte
	n, err := cg.usage.ReadAt(b[:], 0)
	if n == 0 && err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
}

// Limit is the cgroup's memory limit; 0 when it has none.
func (cg *Cgroup) Limit() (int64, error) {
	b, err := os.ReadFile(filepath.Join(cg.Path, cg.file("limit")))
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v >= 1<<62 { // v1 "unlimited" is PAGE_COUNTER_MAX pages
		return 0, err
	}
	return v, nil
}

// LimitHits is how often the cgroup's usage hit its limit (the kernel had
// to reclaim): v1 memory.failcnt, v2 the "max" count of memory.events.
func (cg *Cgroup) LimitHits() uint64 {
	name := "memory.failcnt"
	if cg.V2 {
		name = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(cg.Path, name))
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	if cg.V2 {
		for _, l := range strings.Split(s, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "max" {
				s = f[1]
			}
		}
	}
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// AddPID moves a process into the cgroup.
func (cg *Cgroup) AddPID(pid int) error {
	return os.WriteFile(filepath.Join(cg.Path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// Close releases the cgroup. One the agent created is removed: processes
// still in it go back to the hierarchy's root first.
func (cg *Cgroup) Close() error {
	var errs []error
	if cg.usage != nil {
		cg.usage.Close()
	}
	if cg.created {
		root := filepath.Dir(cg.Path)
		for root != "/" {
			if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err == nil {
				if _, err := os.Stat(filepath.Join(filepath.Dir(root), "cgroup.procs")); err != nil {
					break
				}
			}
			root = filepath.Dir(root)
		}
		if b, err := os.ReadFile(filepath.Join(cg.Path, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0)
			}
		}
		if err := unix.Rmdir(cg.Path); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", cg.Path, err))
		}
		cg.created = false
	}
	if cg.mounted != "" {
		if err := unix.Unmount(cg.mounted, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", cg.mounted, err))
		}
		cg.mounted = ""
	}
	return errors.Join(errs...)
}

// DropFile drops a file's clean pages from the page cache (fadvise
// DONTNEED over the whole file): benches and tests start cold with it.
func DropFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
