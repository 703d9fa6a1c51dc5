package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/pool"
)

// TestExecShowsUp: an exec of /bin/true is logged under its pid.
func TestExecShowsUp(t *testing.T) {
	testenv.RequireRoot(t)
	l, err := Start(pool.Config{BlockSize: 16, MaxBlocks: 8, CapacityBlocks: 4096, MaxObjects: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	if name, err := l.Name(pid); err != nil || name != "/bin/true" {
		t.Fatalf("pid %d: %q, %v; want /bin/true", pid, name, err)
	}
	// A name longer than one block (16 bytes) spans blocks; the kernel
	// keeps the path as given to execve.
	long := "/usr/bin/../bin/true"
	cmd = exec.Command(long)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	entries, err := l.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(entries, Entry{uint32(cmd.Process.Pid), long}); i < 0 {
		t.Errorf("pid %d %s missing from %d entries", cmd.Process.Pid, long, len(entries))
	}
	st, stored, failed, err := l.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d execs stored, %d failed; %d objects, %d bytes, %d blocks, efficiency %.2f, %d leaked",
		stored, failed, st.Objects, st.PayloadBytes, st.LiveBlocks, st.MemoryEfficiency, st.LeakedBlocks)
	if stored < 2 || st.Objects == 0 || st.LeakedBlocks != 0 {
		t.Errorf("stats: %d stored, %+v", stored, st)
	}
}

// TestRun runs the command as a user would and finds its /bin/true.
func TestRun(t *testing.T) {
	testenv.RequireRoot(t)
	var out bytes.Buffer
	if err := run([]string{"--duration", "100ms", "--", "/bin/true"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`ran pid (\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no 'ran pid' line:\n%s", out.String())
	}
	if want := fmt.Sprintf("%8s  /bin/true\n", m[1]); !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "0 leaked") {
		t.Errorf("leak reported:\n%s", out.String())
	}
	t.Logf("\n%s", lastLines(out.String(), 4))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
