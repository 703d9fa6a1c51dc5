package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cistern-ebpf/cistern/kernel"
)

// VmlinuxInclude returns a directory holding vmlinux.h dumped from the running
// kernel's BTF, for tests that compile a BPF variant themselves. It does not
// rely on bpf/include/vmlinux.h, which is gitignored and written only by
// `make generate`: a fresh clone has none.
func VmlinuxInclude(t testing.TB) string {
	t.Helper()
	bpftool := NeedTool(t, "bpftool", "bpftool")
	if err := kernel.BTF(); err != nil {
		t.Skipf("skipped: %v", err) // not a missing tool: a kernel built without BTF
	}
	dir := t.TempDir()
	out, err := exec.Command(bpftool, "btf", "dump", "file", kernel.VmlinuxPath, "format", "c").Output()
	if err != nil {
		t.Fatalf("bpftool btf dump: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vmlinux.h"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
