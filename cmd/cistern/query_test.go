package main

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/query/qgen"
)

// TestQueryInvalidExit2: a sample of generated invalid queries through the
// real binary: exit 2, a line:col reason and a caret, no verifier output.
func TestQueryInvalidExit2(t *testing.T) {
	bin := buildCLI(t)
	r := rand.New(rand.NewSource(8))
	for i := 0; i < 25; i++ {
		q, why := qgen.Invalid(r)
		_, stderr, code := run(bin, "query", q, "--duration", "1s")
		if code != 2 {
			t.Fatalf("%s: %q: exit %d, want 2\n%s", why, q, code, stderr)
		}
		if !strings.Contains(stderr, "^") || !strings.HasPrefix(stderr, "cistern: 1:") || strings.Contains(stderr, "verifier") {
			t.Fatalf("%s: %q: stderr lacks a positioned error:\n%s", why, q, stderr)
		}
	}
	if _, stderr, code := run(bin, "query", "SELECT pid FROM syscalls", "--format", "xml"); code != 2 {
		t.Fatalf("--format xml: exit %d\n%s", code, stderr)
	}
}

func TestQuerySchema(t *testing.T) {
	bin := buildCLI(t)
	out, stderr, code := run(bin, "query", "--schema")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"syscalls", "latency_ns", "sched_switch", "process_exec", "process_exit", "page_cache", "block_io", "tcp_state", "uprobe('<binary>', '<symbol>')"} {
		if !strings.Contains(out, want) {
			t.Errorf("schema lacks %s", want)
		}
	}
}

func TestQueryCSVRun(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	out, stderr, code := run(bin, "query", "SELECT COUNT(*) AS n, MAX(prev_prio) FROM sched_switch", "--duration", "300ms", "--format", "csv", "--explain")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "n,MAX(prev_prio)" || lines[1] == "0,NULL" {
		t.Fatalf("csv %q", out)
	}
	if !strings.Contains(stderr, "chosen plan: agg") {
		t.Fatalf("explain:\n%s", stderr)
	}
}

// TestQueryHistWindowedTable: a windowed HIST and QUANTILE query through
// the binary, in the table format, while dd makes one-byte reads: each
// window's blocks are headed by its end time, the group's line carries
// the quantile with a unit, and the histogram is bars.
func TestQueryHistWindowedTable(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	dd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1", "status=none", "count=100000000")
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { dd.Process.Kill(); dd.Wait() }()
	out, stderr, code := run(bin, "query", "SELECT syscall, QUANTILE(latency_ns, 0.99) AS p99, HIST(latency_ns) AS lat FROM syscalls WHERE comm = 'dd' AND syscall = 'read' GROUP BY syscall WINDOW 300ms", "--duration", "1s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	windows := regexp.MustCompile(`(?m)^window ending \d\d:\d\d:\d\d\.\d{3}\nsyscall=read  p99=\d+(\.\d\d)?(ns|us|ms|s)\nlat:\n`).FindAllStringIndex(out, -1)
	bars := regexp.MustCompile(`(?m)^(\[1\]|\[\d+[KM]?, \d+[KM]?\)) +\d+ \|@{52}\|$`).FindAllString(out, -1)
	if len(windows) < 2 || len(bars) < len(windows) {
		t.Fatalf("want blocks per window (%d) each with a full bar (%d):\n%s", len(windows), len(bars), out)
	}
}

func TestDemoQuery(t *testing.T) {
	testenv.RequireRoot(t)
	var out bytes.Buffer
	c := &cobra.Command{}
	c.SetOut(&out)
	c.SetContext(context.Background())
	if err := demoQuery(c); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"chosen plan: join+agg", "read", "result: plan mvsf"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
}

// TestQueryFilesPrivate: --out's rows and --plot's chart hold what the
// kernel events held (process names here): both are written 0600, --out
// also over an existing world-readable file.
func TestQueryFilesPrivate(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	dir := t.TempDir()
	out, plot := filepath.Join(dir, "rows.json"), filepath.Join(dir, "chart.png")
	if err := os.WriteFile(out, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(bin, "query", "SELECT comm, COUNT(*) AS n FROM sched_switch GROUP BY comm", "--duration", "300ms",
		"--format", "json", "--out", out, "--plot", plot)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, p := range []string{out, plot} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
			t.Errorf("%s: %v, mode %v, want a non-empty 0600 file", p, err, fi.Mode())
		}
	}
	if b, _ := os.ReadFile(out); strings.Contains(string(b), "stale") {
		t.Errorf("--out kept the old contents: %q", b)
	}
}
