package kernel

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// A real refusal: R2 is read before it is written.
func TestLoadErrorIsOneSentence(t *testing.T) {
	_, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name: "uninit", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Reg(asm.R0, asm.R2), asm.Return()},
	}, ebpf.ProgramOptions{LogLevel: ebpf.LogLevelBranch})
	if err == nil {
		t.Fatal("the kernel loaded a program that reads an unset register")
	}
	le := LoadError("the test probe", err)
	var r *RefusedError
	if !errors.As(le, &r) {
		t.Fatalf("%T %v: want *RefusedError", le, le)
	}
	msg := le.Error()
	if strings.Contains(msg, "R2") || strings.Contains(msg, "\n") || !strings.Contains(msg, "refused the test probe") {
		t.Fatalf("message carries the verifier's log or misses what: %q", msg)
	}
	b, rerr := os.ReadFile(r.LogFile)
	if rerr != nil || !strings.Contains(string(b), "R2 !read_ok") {
		t.Fatalf("log file %q: %v %q", r.LogFile, rerr, b)
	}
	if fi, err := os.Stat(r.LogFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log file %q: mode %v, want 0600", r.LogFile, fi.Mode())
	}
	os.Remove(r.LogFile)
	if !errors.Is(le, err) {
		t.Fatal("the cause is not kept")
	}
	if !IsLoadError(fmt.Errorf("start: %w", le)) {
		t.Fatal("IsLoadError does not see a wrapped refusal")
	}
	boom := errors.New("boom")
	other := LoadError("x", boom)
	if got := other.Error(); got != "load x: boom" {
		t.Fatalf("other errors: %q", got)
	}
	if !IsLoadError(other) || !errors.Is(other, boom) || IsLoadError(boom) {
		t.Fatalf("other errors: IsLoadError %v, cause kept %v; IsLoadError(cause) %v", IsLoadError(other), errors.Is(other, boom), IsLoadError(boom))
	}
}
