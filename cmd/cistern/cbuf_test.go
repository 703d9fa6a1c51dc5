package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestCBufCommands(t *testing.T) {
	bin := buildCLI(t)
	sock := filepath.Join(t.TempDir(), "cbuf.sock")
	for _, args := range [][]string{
		{"cbuf", "manager", "--socket", sock, "--memory", "lots"},
		{"cbuf", "manager", "--socket", sock, "--memory", "1K"},
		{"cbuf", "manager", "--socket", sock, "--policy", "fastest"},
		{"cbuf", "manager", "--socket", sock, "--metrics", "nonsense"},
		{"cbuf", "manager", "--socket", sock, "--group", "no-such-group-cistern"},
		{"cbuf", "manager", "--socket", sock, "--allow-group", "no-such-group-cistern"},
		{"cbuf", "manager", "--socket", sock, "--allow-uid", "-3"},
		{"cbuf", "stats", "--bogus"},
	} {
		_, stderr, code := run(bin, args...)
		if code != 2 || strings.Count(stderr, "\n") != 1 {
			t.Errorf("cistern %v: exit %d, stderr %q; want 2 and one line", args, code, stderr)
		}
	}
	if _, stderr, code := run(bin, "cbuf", "stats", "--socket", sock); code != 1 || !strings.Contains(stderr, "no CBUF manager") {
		t.Errorf("stats without a manager: exit %d, %q", code, stderr)
	}

	m := exec.Command(bin, "cbuf", "manager", "--socket", sock, "--memory", "8M", "--policy", "qos", "--metrics", "127.0.0.1:0")
	pipe, _ := m.StderrPipe()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var metricsURL string
	var errb bytes.Buffer
	for l := range lines {
		errb.WriteString(l + "\n")
		if strings.HasPrefix(l, "metrics on ") {
			metricsURL = strings.TrimPrefix(l, "metrics on ")
			break
		}
	}
	if metricsURL == "" {
		t.Fatalf("manager printed no metrics address: %s", errb.String())
	}
	var c *cbuf.Client
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if c, err = cbuf.ConnectWith(sock, cbuf.ClientOptions{Name: "cli-test", QosTargetPct: 5}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("manager never listened: %v\n%s", err, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, id, err := c.Alloc(3 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(bin, "cbuf", "stats", "--socket", sock, "--json")
	if code != 0 {
		t.Fatalf("stats: %d %s", code, stderr)
	}
	var s cbuf.Stats
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, stdout)
	}
	if s.Policy != "qos" || s.MemoryPages != 2048 || len(s.Components) != 1 || s.Components[0].Name != "cli-test" ||
		s.Components[0].QosTargetPct != 5 || s.Components[0].UsedPages == 0 || s.Components[0].Allocs != 1 ||
		s.Components[0].UID != uint32(os.Getuid()) || s.Components[0].Pid != int32(os.Getpid()) {
		t.Fatalf("stats do not describe the one component: %+v", s)
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the manager's socket: %v %v, want mode 0600", st.Mode(), err)
	}
	if !strings.Contains(string(body), "cistern_cbuf_c0_allocs_total 1") || !strings.Contains(string(body), "cistern_cbuf_used_pages_total") ||
		!strings.Contains(string(body), fmt.Sprintf("cistern_cbuf_c0_uid_total %d", os.Getuid())) ||
		!strings.Contains(string(body), "cistern_cbuf_refused_connections_total 0") {
		t.Errorf("metrics lack the component's counters:\n%s", body)
	}
	c.Free(id)
	c.Close()
	if stdout, _, _ := run(bin, "cbuf", "stats", "--socket", sock); !strings.Contains(stdout, "policy qos") {
		t.Errorf("stats table: %q", stdout)
	}
	m.Process.Signal(syscall.SIGTERM)
	for l := range lines {
		errb.WriteString(l + "\n")
	}
	if err := m.Wait(); err != nil {
		t.Fatalf("manager exit on SIGTERM: %v\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "malformed requests dropped") {
		t.Errorf("manager did not print its drop counters on exit: %s", errb.String())
	}
}

func TestCBufManagerKernel(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	sock := filepath.Join(t.TempDir(), "cbuf.sock")
	m := exec.Command(bin, "cbuf", "manager", "--socket", sock, "--kernel")
	var errb bytes.Buffer
	m.Stderr = &errb
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Process.Kill()
	var out string
	for i := 0; i < 100; i++ {
		if o, _, code := run(bin, "cbuf", "stats", "--socket", sock); code == 0 {
			out = o
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out, "kernel component: 64 pages") {
		t.Fatalf("stats with --kernel: %q", out)
	}
	m.Process.Signal(syscall.SIGTERM)
	if err := m.Wait(); err != nil {
		t.Fatalf("manager --kernel exit: %v", err)
	}
}
