package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestCaptureCLINoAuthSecrets: roles that log in with a password (on
// PostgreSQL by SCRAM and by the cleartext "password" method, whose
// PasswordMessage carries the password itself, over TLS and in plaintext;
// on MariaDB by mysql_native_password) run queries from node-postgres and
// mysql2 while `cistern capture --all` records them raw (the audit mode)
// as JSON, with --summary, --metrics and raw OTLP spans. The password
// appears in none of it: records, summary, the exit lines, the metrics, the
// spans the collector got; and the queries of those roles were captured
// with their user, so the logins passed through the capture.
func TestCaptureCLINoAuthSecrets(t *testing.T) {
	testenv.RequireRoot(t)
	node := testenv.NeedTool(t, "node", "nodejs (Node.js 20, from nodejs.org or NodeSource)")
	const modules = "/var/cache/cistern/node/node_modules"
	testenv.NeedFile(t, modules+"/pg", "scripts/node-clients.sh (sudo make deps runs it)")
	tc := testenv.TLSCert(t)
	secret := "Pw-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-zq"
	// An hba file the postgres user can read: trust for the admin, a
	// password for the test roles.
	hbaDir, err := os.MkdirTemp("", "cistern-hba-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hbaDir) })
	os.Chmod(hbaDir, 0o755)
	hba := filepath.Join(hbaDir, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("local all all trust\nhost all postgres 127.0.0.1/32 trust\n"+
		"host all aud_scram 127.0.0.1/32 scram-sha-256\nhost all aud_clear 127.0.0.1/32 password\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := tc.PostgresConf()
	conf["hba_file"] = hba
	conf["password_encryption"] = "scram-sha-256"
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54358, Conf: conf})
	for _, r := range []string{"aud_scram", "aud_clear"} {
		if _, err := pg.Psql(fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", r, secret)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := servers.StartMariaDB(servers.MariaDBOptions{Port: 53312, TLS: tc})
	if testenv.NotInstalled(t, err); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	if out, err := m.Client(fmt.Sprintf("CREATE USER aud_my@'127.0.0.1' IDENTIFIED BY '%s'", secret)); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	testenv.Exclusive(t, testenv.Traffic) // --all
	bin := buildCLI(t)
	// A collector that keeps what it is sent.
	var mu sync.Mutex
	var spans []byte
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			if z, err := gzip.NewReader(r.Body); err == nil {
				body = z
			}
		}
		b, _ := io.ReadAll(body)
		mu.Lock()
		spans = append(spans, b...)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer col.Close()
	script, _ := filepath.Abs("../../bench/capture/node/client.js")
	for _, c := range []struct {
		protocol string
		port     int
		users    []string
		kind     string
	}{{"postgres", pg.Opt.Port, []string{"aud_scram", "aud_clear"}, "pg"}, {"mysql", m.Opt.Port, []string{"aud_my"}, "mysql"}} {
		t.Run(c.protocol, func(t *testing.T) {
			outPath := filepath.Join(t.TempDir(), "records.json")
			cmd := exec.Command(bin, "capture", "--all", "--protocol", c.protocol, "--format", "json", "--summary",
				"--out", outPath, "--metrics", "127.0.0.1:0", "--otlp", col.URL, "--otlp-protocol", "http", "--otlp-query-text", "raw")
			errPipe, _ := cmd.StderrPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			sc := bufio.NewScanner(errPipe)
			var stderr []string
			metricsURL := ""
			for sc.Scan() {
				stderr = append(stderr, sc.Text())
				if u, ok := strings.CutPrefix(sc.Text(), "metrics at "); ok {
					metricsURL = u
				}
				if strings.HasPrefix(sc.Text(), "capturing ") {
					break
				}
			}
			tok := strconv.FormatInt(time.Now().UnixNano(), 36)
			for _, u := range c.users {
				cl := exec.Command(node, script, c.kind, strconv.Itoa(c.port), tok+u, "2")
				cl.Env = append(os.Environ(), "NODE_PATH="+modules, "CISTERN_DB_USER="+u, "CISTERN_DB_PASSWORD="+secret)
				if out, err := cl.CombinedOutput(); err != nil {
					t.Fatalf("node client as %s: %v: %s", u, err, out)
				}
			}
			time.Sleep(2 * time.Second) // the last records through the channel
			var metrics []byte
			if resp, err := http.Get(metricsURL); err == nil {
				metrics, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			cmd.Process.Signal(syscall.SIGINT)
			for sc.Scan() {
				stderr = append(stderr, sc.Text())
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("capture: %v\n%s", err, strings.Join(stderr, "\n"))
			}
			records, err := os.ReadFile(outPath)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := string(spans)
			mu.Unlock()
			for what, text := range map[string]string{"records and summary": string(records), "exit lines": strings.Join(stderr, "\n"),
				"metrics": string(metrics), "OTLP spans": got} {
				if strings.Contains(text, secret) {
					t.Errorf("the password is in the %s", what)
				}
			}
			// The logins passed through the capture: each role's marked
			// queries are there with its user, and the spans were sent.
			for _, u := range c.users {
				if !strings.Contains(string(records), `"user":"`+u+`"`) || !strings.Contains(string(records), "n-"+tok+u+"-tls-s-0") ||
					!strings.Contains(string(records), "n-"+tok+u+"-plain-e-1") {
					t.Errorf("%s's queries over TLS and plaintext not captured with its user:\n%s", u, records)
				}
			}
			if !strings.Contains(string(records), `{"summary":`) || !strings.Contains(got, tok) {
				t.Errorf("no summary in the records, or no span with the queries (%d bytes of spans)", len(got))
			}
		})
	}
}
