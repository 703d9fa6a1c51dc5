package capture

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/mounts"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestCaptureServerChildrenTLS captures the server side: --pid of the
// postmaster, whose backends fork after the capture starts. psql maps the
// same libssl and so hits the same (system-wide) uprobes: the selection in
// BPF must keep it out, or every query would be captured twice.
func TestCaptureServerChildrenTLS(t *testing.T) {
	testenv.RequireRoot(t)
	tc := testenv.TLSCert(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54349, Conf: tc.PostgresConf()})
	pid, err := pg.PID()
	if err != nil {
		t.Fatal(err)
	}
	got := checkCapturePsql(t, pg, "sslmode=require", Options{PID: pid, Children: true, Transport: TransportTLS})
	if len(got) > 0 && int(got[0].PID) == pid {
		t.Errorf("queries attributed to the postmaster %d, want a backend it forked", pid)
	}
}

// TestCaptureServerCgroupPlain captures the server side of plaintext
// connections by cgroup: the postmaster is moved into a new cgroup-v2 group,
// so the backends it forks for psql are born there.
func TestCaptureServerCgroupPlain(t *testing.T) {
	testenv.RequireRoot(t)
	roots := mounts.MountPoints("cgroup2")
	if len(roots) == 0 {
		t.Skip("skipped: no cgroup v2 hierarchy mounted") // not a missing tool: the machine's cgroup layout
	}
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54350})
	pid, err := pg.PID()
	if err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(roots[0], "cistern-capture-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("skipped: cannot create a cgroup: %v", err) // not a missing tool: the machine's cgroup layout
	}
	t.Cleanup(func() {
		// Runs before the server stops: hand its processes back first.
		if pids, err := CgroupPIDs(cg); err == nil {
			for _, p := range pids {
				os.WriteFile(filepath.Join(roots[0], "cgroup.procs"), []byte(strconv.Itoa(p)), 0)
			}
		}
		os.Remove(cg)
	})
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatalf("move postmaster %d into %s: %v", pid, cg, err)
	}
	got := checkCapturePsql(t, pg, "sslmode=disable", Options{Cgroup: cg, Transport: TransportPlain})
	if len(got) > 0 && int(got[0].PID) == pid {
		t.Errorf("queries attributed to the postmaster %d, want a backend it forked", pid)
	}
}

// TestSelectionErrors: a capture needs exactly one selection.
func TestSelectionErrors(t *testing.T) {
	for _, o := range []Options{{}, {PID: 1, All: true}, {Cgroup: "x", All: true}, {All: true, Children: true}, {PID: -3}} {
		if _, err := Open(o); err == nil {
			t.Errorf("Open(%+v): no error", o)
		}
	}
	if _, err := ResolveCgroup("no/such/cgroup/here"); err == nil {
		t.Error("ResolveCgroup of a missing directory: no error")
	}
}

// TestCaptureLibraryMappedLater: a TLS capture of an empty cgroup starts
// with no library; psql then runs in the cgroup with its own copy of
// libssl.so.3 (another file, as in a container image). The rescan attaches
// to the copy while psql sleeps in its first query, and the next query is
// captured from psql itself.
func TestCaptureLibraryMappedLater(t *testing.T) {
	testenv.RequireRoot(t)
	roots := mounts.MountPoints("cgroup2")
	if len(roots) == 0 {
		t.Skip("skipped: no cgroup v2 hierarchy mounted") // not a missing tool: the machine's cgroup layout
	}
	tc := testenv.TLSCert(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54352, Conf: tc.PostgresConf()})
	sys, err := FindLibSSL(os.Getpid())
	if err != nil { // this test binary does not map libssl: find psql's
		out, lerr := exec.Command("sh", "-c", "ldd "+pg.Bin("psql")+" | awk '/libssl.so.3/ {print $3}'").Output()
		if lerr != nil || len(strings.TrimSpace(string(out))) == 0 {
			testenv.Missing(t, "psql's libssl.so.3 ("+fmt.Sprint(lerr)+")", "apt-get install libssl3 postgresql-client")
		}
		sys = strings.TrimSpace(string(out))
	}
	libDir := t.TempDir()
	data, err := os.ReadFile(sys)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(libDir, "libssl.so.3"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(roots[0], "cistern-capture-lib-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("skipped: cannot create a cgroup: %v", err) // not a missing tool: the machine's cgroup layout
	}
	t.Cleanup(func() { os.Remove(cg) })

	c, err := Open(Options{Cgroup: cg, Transport: TransportTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.LibSSL != "" {
		t.Fatalf("empty cgroup, yet attached to %s", c.LibSSL)
	}
	conn := fmt.Sprintf("sslmode=require host=127.0.0.1 port=%d user=postgres dbname=postgres", pg.Opt.Port)
	psql := exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
		pg.Bin("psql"), "-X", "-q", conn, "-c", "SELECT pg_sleep(2);", "-c", "SELECT 'after the rescan' AS late;")
	psql.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDir)
	if err := psql.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- psql.Wait() }()
	var got []Query
	exited := false
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		qs, err := c.Next(100 * time.Millisecond)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
		got = append(got, qs...)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("psql: %v", err)
			}
			exited, end = true, time.Now().Add(time.Second) // drain the rest
		default:
		}
	}
	if !exited {
		psql.Process.Kill()
		t.Fatal("psql did not finish in 20 s")
	}
	cn, _ := c.Counters()
	found := false
	for _, q := range got {
		t.Logf("captured: pid %d %q", q.PID, q.Query)
		if q.Query == "SELECT 'after the rescan' AS late;" && int(q.PID) == psql.Process.Pid {
			found = true
		}
	}
	if !found || cn["libraries_attached"] != 1 || cn["library_attach_errors"] != 0 {
		t.Fatalf("the later query of psql (pid %d) through its own libssl copy: found %v; counters %v", psql.Process.Pid, found, cn)
	}
}
