package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

func TestCacheAgentUsage(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"cache", "agent"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "nope"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "mru", "--scan-pid", "5"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "get-scan", "--scan-pid", "-1"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "auto", "--scan-pid", "0"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "lfu", "--scan-read-pages", "32"},
		{"cache", "agent", "--cgroup", "x", "--dir", dir, "--policy", "scan-only", "--scan-read-pages", "32"},
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

// TestCacheAgentSignalCleansUp runs the real command (a policy, and auto
// with a declared scanner), stops it with SIGTERM and checks that it
// printed its counters and removed its cgroup.
func TestCacheAgentSignalCleansUp(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		said    string // in its stderr
		counter string // among its counters
	}{
		{"lru", []string{"--policy", "lru"}, "Ctrl-C stops", "pages_evicted"},
		{"auto", []string{"--policy", "auto", "--scan-pid", strconv.Itoa(os.Getpid())},
			fmt.Sprintf("scanners [%d] declared", os.Getpid()), "auto_sampled_loads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("cistern-test-cli-%s-%d", tc.name, os.Getpid())
			var o, e bytes.Buffer
			c := exec.Command(bin, append([]string{"cache", "agent", "--cgroup", name, "--limit", "64M", "--dir", dir}, tc.args...)...)
			c.Stdout, c.Stderr = &o, &e
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cgPath := ""
			limit := testenv.StartTimeout(5 * time.Second) // BPF load under the load of parallel packages
			for end := time.Now().Add(limit); time.Now().Before(end) && cgPath == ""; {
				time.Sleep(50 * time.Millisecond)
				if s := e.String(); strings.Contains(s, "Ctrl-C stops") && strings.Contains(s, tc.said) {
					i := strings.Index(s, "cgroup ")
					cgPath = strings.TrimSuffix(strings.TrimSuffix(strings.Fields(s[i+7:])[0], ";"), ":")
				}
			}
			if cgPath == "" {
				c.Process.Kill()
				c.Wait()
				t.Fatalf("agent did not start (or did not say %q) in %v: %s", tc.said, limit, e.String())
			}
			if _, err := os.Stat(cgPath); err != nil {
				t.Errorf("cgroup %s not created: %v", cgPath, err)
			}
			c.Process.Signal(syscall.SIGTERM)
			if err := c.Wait(); err != nil {
				t.Fatalf("agent exit: %v: %s", err, e.String())
			}
			if !strings.Contains(o.String(), tc.counter) {
				t.Errorf("no counters printed (want %s): %q", tc.counter, o.String())
			}
			if _, err := os.Stat(cgPath); !os.IsNotExist(err) {
				t.Errorf("cgroup %s left behind: %v", cgPath, err)
			}
		})
	}
}

// TestCacheAgentLoadFailure: when the kernel will not load the agent's
// programs (here: no CAP_PERFMON, which tracing programs need; which of the
// policy object's programs the kernel turns away first, and how, varies), the agent
// exits 1 with kernel.LoadError's one line, not 2 as if a flag were wrong,
// and leaves no cgroup behind.
func TestCacheAgentLoadFailure(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.NeedTool(t, "setpriv", "util-linux")
	bin := buildCLI(t)
	dir := t.TempDir()
	name := fmt.Sprintf("cistern-test-cli-nocap-%d", os.Getpid())
	var o, e bytes.Buffer
	c := exec.Command(setpriv, "--bounding-set=-perfmon,-sys_admin", bin,
		"cache", "agent", "--cgroup", name, "--limit", "64M", "--dir", dir, "--policy", "lru")
	c.Stdout, c.Stderr = &o, &e
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	msg := e.String()
	if code != 1 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "page-cache") {
		t.Errorf("agent without CAP_PERFMON: exit %d, want 1 with one line naming what failed to load; stderr %q", code, msg)
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/" + name + "*"); len(m) > 0 {
		t.Errorf("cgroup left behind: %v", m)
	}
}

// TestCacheAgentRefusalIsRuntime: a real verifier refusal (a program that
// reads a register it never set), as pagecache.Start returns it through
// kernel.LoadError, exits 1 with one sentence.
func TestCacheAgentRefusalIsRuntime(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "uninit", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Reg(asm.R0, asm.R2), asm.Return()},
	})
	if err == nil {
		t.Fatal("the kernel loaded a program that reads an unset register")
	}
	le := kernel.LoadError("page-cache policy lru", err)
	var r *kernel.RefusedError
	if !errors.As(le, &r) {
		t.Fatalf("%T %v: want a *kernel.RefusedError", le, le)
	}
	if r.LogFile != "" {
		defer os.Remove(r.LogFile)
	}
	got := agentStartError(le)
	if code := exitCode(got); code != 1 || strings.Contains(got.Error(), "\n") || !strings.Contains(got.Error(), "refused page-cache policy lru") {
		t.Errorf("refusal: exit %d, message %q; want 1 and one sentence", code, got)
	}
	if code := exitCode(agentStartError(errors.New("cgroup x: no such cgroup"))); code != 2 {
		t.Errorf("a bad --cgroup: exit %d, want 2", code)
	}
}
