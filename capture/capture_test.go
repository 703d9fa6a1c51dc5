package capture

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// tlsCert writes a self-signed certificate and key PostgreSQL accepts (key
// owned by postgres, mode 0600) into a directory postgres can read.
func tlsCert(t *testing.T) (cert, key string) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("skipped: openssl not installed")
	}
	dir, err := os.MkdirTemp("", "cistern-capture-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	out, err := exec.Command("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
		"-subj", "/CN=127.0.0.1", "-keyout", key, "-out", cert).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl: %v: %s", err, out)
	}
	if out, err := exec.Command("chown", "postgres:postgres", cert, key).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v: %s", err, out)
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestCapturePsqlOverTLS runs psql over TLS against a real PostgreSQL and
// checks that every statement it sent is captured with its outcome.
func TestCapturePsqlOverTLS(t *testing.T) {
	testenv.RequireRoot(t)
	cert, key := tlsCert(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54347, Conf: map[string]string{
		"ssl": "on", "ssl_cert_file": cert, "ssl_key_file": key,
	}})

	psql := exec.Command(pg.Bin("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=0",
		fmt.Sprintf("sslmode=require host=127.0.0.1 port=%d user=postgres dbname=postgres", pg.Opt.Port))
	stdin, err := psql.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	psql.Stdout, psql.Stderr = &out, &out
	if err := psql.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { psql.Process.Kill(); psql.Wait() })

	// psql links libpq, which links libssl: wait for the loader to map it.
	var c *Capture
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err = FindLibSSL(psql.Process.Pid); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("psql never mapped libssl: %v (output %q)", err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c, err = Open(Options{PID: psql.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	issued := []string{
		"SELECT 1 AS one;",
		"SELECT generate_series(1, 5);",
		"CREATE TABLE capture_t (a int, b text);",
		"INSERT INTO capture_t VALUES (1, 'x'), (2, 'y'), (3, 'z');",
		"SELECT * FROM no_such_table;",
		"SELECT b FROM capture_t WHERE a >= 2 ORDER BY a;",
	}
	for _, q := range issued {
		if _, err := fmt.Fprintln(stdin, q); err != nil {
			t.Fatal(err)
		}
	}
	stdin.Close()

	var got []Query
	done := make(chan error, 1)
	go func() { done <- psql.Wait() }()
	exited := false
	for idle := time.Now(); time.Since(idle) < 2*time.Second; {
		qs, err := c.Next(100 * time.Millisecond)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if !exited {
				select {
				case <-done:
					exited = true
					idle = time.Now()
				default:
				}
			}
			if exited && len(got) >= len(issued) {
				break
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, qs...)
		idle = time.Now()
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("psql output: %q", out.String())
	for _, q := range got {
		t.Logf("captured: %+v", q)
	}
	t.Logf("channel: %+v, gaps %v", st, c.Gaps())

	if len(got) != len(issued) {
		t.Fatalf("captured %d queries, issued %d", len(got), len(issued))
	}
	wantRows := []int64{1, 5, 0, 3, 0, 2}
	for i, q := range got {
		if q.Query != issued[i] {
			t.Errorf("query %d: captured %q, issued %q", i, q.Query, issued[i])
		}
		if q.Rows != wantRows[i] {
			t.Errorf("query %d (%s): %d rows, want %d", i, q.Query, q.Rows, wantRows[i])
		}
		if (i == 4) != (q.Error != "") {
			t.Errorf("query %d (%s): error %q", i, q.Query, q.Error)
		}
		if q.PID != uint32(psql.Process.Pid) || q.Protocol != "postgres" || q.LatencyUS <= 0 {
			t.Errorf("query %d: pid %d protocol %s latency %v", i, q.PID, q.Protocol, q.LatencyUS)
		}
	}
	if !strings.Contains(got[4].Error, "42P01") {
		t.Errorf("error of %q: %q, want SQLSTATE 42P01", got[4].Query, got[4].Error)
	}
	if st.LostRecords != 0 || st.LostBytes != 0 || len(c.Gaps()) != 0 {
		t.Errorf("loss: %+v gaps %v", st, c.Gaps())
	}
}
