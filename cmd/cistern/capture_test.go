package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestCaptureUsage: selection and protocol mistakes are usage errors (exit 2,
// one line).
func TestCaptureUsage(t *testing.T) {
	bin := buildCLI(t)
	for _, args := range [][]string{
		{"capture"},
		{"capture", "--pid", "1", "--all"},
		{"capture", "--cgroup", "x", "--pid", "1"},
		{"capture", "--all", "--protocol", "oracle"},
		{"capture", "--cgroup", "no/such/cgroup/here"},
		{"capture", "--pid", "-4"},
	} {
		_, stderr, code := run(bin, args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, stderr)
		}
	}
}

// TestCaptureCLIServerJSON captures a PostgreSQL server by its postmaster's
// pid (the backend psql gets is forked after the capture starts) and checks
// the JSON records.
func TestCaptureCLIServerJSON(t *testing.T) {
	testenv.RequireRoot(t)
	tc := testenv.TLSCert(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54351, Conf: tc.PostgresConf()})
	pid, err := pg.PID()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildCLI(t)
	outPath := filepath.Join(t.TempDir(), "queries.json")
	c := exec.Command(bin, "capture", "--pid", strconv.Itoa(pid), "--format", "json", "--duration", "5s",
		"--out", outPath, "--metrics", "127.0.0.1:0")
	errPipe, _ := c.StderrPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	sc := bufio.NewScanner(errPipe)
	var metricsURL string
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "capturing postgres of pid") {
		metricsURL, _ = strings.CutPrefix(sc.Text(), "metrics at ")
	}
	if metricsURL == "" {
		t.Fatalf("capture did not start with metrics: %q", sc.Text())
	}
	const q = "SELECT 40 + 2 AS answer"
	if _, err := pg.Psql(q); err != nil { // sslmode prefer: TLS
		t.Fatal(err)
	}
	// The agent's counters, live.
	for deadline := time.Now().Add(3 * time.Second); ; {
		resp, err := http.Get(metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "\ncistern_capture_queries_total 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never counted the query:\n%s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var summary string
	for sc.Scan() {
		summary = sc.Text()
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("capture did not stop after --duration")
	}
	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		for _, k := range []string{"ts", "pid", "tid", "comm", "side", "local", "remote", "transport", "library",
			"conn", "protocol", "query", "fingerprint", "latency_us", "latency_exact", "rows", "error"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("record %q has no %q", line, k)
			}
		}
		if rec["query"] == q && rec["rows"] == 1.0 && rec["pid"] != float64(pid) && rec["user"] == "postgres" &&
			rec["side"] == "server" && rec["comm"] == "postgres" && rec["local"] == pg.Addr() &&
			rec["fingerprint"] == capture.FingerprintOf("postgres", "SELECT ? + ? AS answer").String() {
			found = true
		}
	}
	if !found {
		t.Errorf("%q not captured from a backend with user postgres; output %q", q, out)
	}
	if !strings.Contains(summary, "1 queries") || !strings.Contains(summary, "lost: 0 records") {
		t.Errorf("summary %q", summary)
	}
	if fi, err := os.Stat(outPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("--out file: %v, want mode 0600", fi.Mode())
	}
}

// TestCaptureCLISanitizedTable: with --query-text sanitized, the table
// shows the statements' shape and fingerprint, not their values, and the
// error's code, not its message; --out over an existing world-readable
// file leaves it 0600 with the new records only.
func TestCaptureCLISanitizedTable(t *testing.T) {
	testenv.RequireRoot(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54373})
	pid, err := pg.PID()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildCLI(t)
	outPath := filepath.Join(t.TempDir(), "queries.txt")
	if err := os.WriteFile(outPath, []byte("stale contents of an earlier file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(bin, "capture", "--pid", strconv.Itoa(pid), "--query-text", "sanitized", "--duration", "4s", "--out", outPath)
	errPipe, _ := c.StderrPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()
	sc := bufio.NewScanner(errPipe)
	var stderr []string
	for sc.Scan() {
		stderr = append(stderr, sc.Text())
		if strings.HasPrefix(sc.Text(), "capturing postgres of pid") {
			break
		}
	}
	const secret = "s3cret-value"
	for _, q := range []string{"ALTER ROLE postgres PASSWORD '" + secret + "'", "SELECT * FROM nosuch WHERE x = '" + secret + "'"} {
		pg.Psql(q) // the second fails: relation "nosuch" does not exist
	}
	for sc.Scan() {
		stderr = append(stderr, sc.Text())
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("capture: %v\n%s", err, strings.Join(stderr, "\n"))
	}
	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	if fi, _ := os.Stat(outPath); fi.Mode().Perm() != 0o600 || strings.Contains(text, "stale") {
		t.Errorf("--out over an existing 0644 file: mode %v, contents %q", fi.Mode(), out)
	}
	if strings.Contains(text, secret) || strings.Contains(text, "does not exist") || strings.Contains(text, "nosuch\"") {
		t.Errorf("the table shows a value or an error message:\n%s", out)
	}
	for _, want := range []string{"FINGERPRINT", "ALTER ROLE postgres PASSWORD ?", "SELECT * FROM nosuch WHERE x = ?  ERROR 42P01",
		capture.FingerprintOf("postgres", "ALTER ROLE postgres PASSWORD 'other'").String()} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the table:\n%s", want, out)
		}
	}
}
