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
	Data  string // mount options when Cistern mounts it
}

var (
	Tracefs = FS{"tracefs", "/sys/kernel/tracing", unix.TRACEFS_MAGIC, ""}
	// bpffs mounted by Cistern is root-only (mode=700, as systemd mounts
	// it): the kernel's default is 1777.
	BPFFS      = FS{"bpf", "/sys/fs/bpf", unix.BPF_FS_MAGIC, "mode=700"}
	Securityfs = FS{"securityfs", "/sys/kernel/security", unix.SECURITYFS_MAGIC, ""}
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
	if err := unix.Mount(fs.Type, fs.Path, fs.Type, 0, fs.Data); err != nil {
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

// PinMode is the mode of every directory Cistern pins BPF objects under:
// the maps hold what the programs saw (keys, values, counters), and a
// process that opens a pinned map may change it, so only root goes in. The
// pins themselves are made 0600 by the kernel.
const PinMode os.FileMode = 0o700

// PinDir makes dir (and any missing parent) for pins, root-only: each
// directory it creates is PinMode whatever the umask, and dir itself, if it
// was there with a wider mode, is set to PinMode. Parents that exist keep
// their mode (/sys/fs/bpf is the system's).
func PinDir(dir string) error {
	dir = filepath.Clean(dir)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pin directory %s: %w", d, err)
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], PinMode); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("pin directory: %w", err)
		}
	}
	fix := missing // Mkdir's mode went through the umask
	if len(fix) == 0 {
		fix = []string{dir}
	}
	for _, d := range fix {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pin directory: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("pin directory %s: not a directory", d)
		}
		if fi.Mode().Perm() != PinMode {
			if err := os.Chmod(d, PinMode); err != nil {
				return fmt.Errorf("pin directory %s: %w", d, err)
			}
		}
	}
	return nil
}

// LockDir is where machine-wide lock files go: /run/lock (or /var/lock),
// shared by every checkout and process, else the temporary directory.
func LockDir() string {
	for _, d := range []string{"/run/lock", "/var/lock"} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return os.TempDir()
}
