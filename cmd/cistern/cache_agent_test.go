package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestCacheAgentUsage(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"cache", "agent"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "nope"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "mru", "--scan-pid", "5"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "get-scan", "--scan-pid", "-1"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "mru", "--limit", "12Q"},
		{"cache", "agent", "--cgroup", "x", "--dir", filepath.Join(dir, "missing"), "--policy", "mru"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "lru", "--access-sample", "3"},
	} {
		_, stderr, code := run(bin, args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("cistern %v: exit %d, want 2 with one line (stderr %q)", args, code, stderr)
		}
	}
}

// TestCacheAgentSignalCleansUp runs the real command, stops it with
// SIGTERM and checks that it printed its counters and removed its cgroup.
func TestCacheAgentSignalCleansUp(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cistern-test-cli-%d", os.Getpid())
	var o, e bytes.Buffer
	c := exec.Command(bin, "cache", "agent", "--cgroup", name, "--limit", "64M", "--dir", dir, "--policy", "lru")
	c.Stdout, c.Stderr = &o, &e
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	cgPath := ""
	limit := testenv.StartTimeout(5 * time.Second) // BPF load under the load of parallel packages
	for end := time.Now().Add(limit); time.Now().Before(end) && cgPath == ""; {
		time.Sleep(50 * time.Millisecond)
		if s := e.String(); strings.Contains(s, "Ctrl-C stops") {
			i := strings.Index(s, "cgroup ")
			cgPath = strings.TrimSuffix(strings.Fields(s[i+7:])[0], ";")
		}
	}
	if cgPath == "" {
		c.Process.Kill()
		c.Wait()
		t.Fatalf("agent did not start in %v: %s", limit, e.String())
	}
	if _, err := os.Stat(cgPath); err != nil {
		t.Errorf("cgroup %s not created: %v", cgPath, err)
	}
	c.Process.Signal(syscall.SIGTERM)
	if err := c.Wait(); err != nil {
		t.Fatalf("agent exit: %v: %s", err, e.String())
	}
	if !strings.Contains(o.String(), "pages_evicted") {
		t.Errorf("no counters printed: %q", o.String())
	}
	if _, err := os.Stat(cgPath); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind: %v", cgPath, err)
	}
}
