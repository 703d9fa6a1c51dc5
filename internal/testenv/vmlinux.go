package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// VmlinuxInclude returns a directory holding vmlinux.h dumped from the running
// kernel's BTF, for tests that compile a BPF variant themselves. It does not
// rely on bpf/include/vmlinux.h, which is gitignored and written only by
// `make generate`: a fresh clone has none.
func VmlinuxInclude(t testing.TB) string {
	t.Helper()
	bpftool := NeedTool(t, "bpftool", "bpftool")
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("skipped: the kernel has no BTF (/sys/kernel/btf/vmlinux)") // not a missing tool: a kernel built without BTF
	}
	dir := t.TempDir()
	out, err := exec.Command(bpftool, "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c").Output()
	if err != nil {
		t.Fatalf("bpftool btf dump: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vmlinux.h"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
