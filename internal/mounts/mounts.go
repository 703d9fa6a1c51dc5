// Package mounts makes sure the pseudo filesystems Cistern needs (tracefs,
// bpffs, securityfs) are mounted, mounting them when they are not.
package mounts

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// FS describes one pseudo filesystem and where Cistern expects it.
type FS struct {
	Type  string // filesystem type as in /proc/mounts
	Path  string // canonical mount point
	Magic int64  // statfs magic, to recognise it however it was mounted
}

var (
	Tracefs    = FS{"tracefs", "/sys/kernel/tracing", unix.TRACEFS_MAGIC}
	BPFFS      = FS{"bpf", "/sys/fs/bpf", unix.BPF_FS_MAGIC}
	Securityfs = FS{"securityfs", "/sys/kernel/security", unix.SECURITYFS_MAGIC}
)

// Mounted reports whether fs is mounted at its canonical path.
func Mounted(fs FS) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(fs.Path, &st); err != nil {
		return false
	}
	return int64(st.Type) == fs.Magic
}

// Ensure mounts fs at its canonical path unless it already is.
// It returns true when it had to mount it.
func Ensure(fs FS) (mounted bool, err error) {
	if Mounted(fs) {
		return false, nil
	}
	if err := os.MkdirAll(fs.Path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return false, fmt.Errorf("create %s: %w", fs.Path, err)
	}
	if err := unix.Mount(fs.Type, fs.Path, fs.Type, 0, ""); err != nil {
		return false, fmt.Errorf("mount %s at %s: %w (run as root)", fs.Type, fs.Path, err)
	}
	return true, nil
}

// MountPoints lists where filesystems of type typ are mounted.
func MountPoints(typ string) []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && fields[2] == typ {
			out = append(out, fields[1])
		}
	}
	return out
}

// PinDir creates dir (under bpffs) and every missing parent below the
// bpffs root with mode 0700, and tightens an existing dir to 0700: pinned
// maps hold state (keys, counters) only root should reach, and a pinned
// object's own mode is not the only gate when a directory is open to all.
func PinDir(dir string) error {
	dir = filepath.Clean(dir)
	var todo []string
	for d := dir; d != "/" && d != "." && d != BPFFS.Path; d = filepath.Dir(d) {
		todo = append(todo, d)
	}
	for i := len(todo) - 1; i >= 0; i-- {
		d := todo[i]
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("chmod %s: %w", d, err)
		}
	}
	return nil
}
