package mounts

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// TestPinDir: pins go under root-only directories on bpffs, whatever the
// umask, and a pin directory found wider is narrowed; the pins are 0600.
func TestPinDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped (internal/mounts): pinning needs root; run sudo make test") // not a missing tool: root
	}
	if _, err := Ensure(BPFFS); err != nil {
		t.Fatal(err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	top := filepath.Join(BPFFS.Path, fmt.Sprintf("cistern-pindir-test-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(top) })
	dir := filepath.Join(top, "kv", "eth0")
	if err := PinDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{top, filepath.Join(top, "kv"), dir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want a 0700 directory", d, fi.Mode(), err)
		}
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pin := filepath.Join(dir, "counters")
	if err := m.Pin(pin); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(pin); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("pin %s: mode %v %v, want no access for group or others", pin, fi.Mode(), err)
	}
	// Found wide open (an older version, or someone's mkdir): narrowed.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := PinDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("existing 0777 pin directory left %v", fi.Mode())
	}
	if err := PinDir(pin); err == nil {
		t.Error("PinDir accepted a pinned map as a directory")
	}
}

// TestBPFFSMountMode: a bpffs Cistern mounts is root-only (the kernel's
// default root is 1777).
func TestBPFFSMountMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped (internal/mounts): mounting needs root; run sudo make test") // not a missing tool: root
	}
	fs := BPFFS
	fs.Path = t.TempDir()
	mounted, err := Ensure(fs)
	if err != nil || !mounted {
		t.Fatalf("mounted %v: %v", mounted, err)
	}
	defer syscall.Unmount(fs.Path, 0)
	if fi, err := os.Stat(fs.Path); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("bpffs root %v %v, want 0700 (the kernel adds the sticky bit)", fi.Mode(), err)
	}
}
