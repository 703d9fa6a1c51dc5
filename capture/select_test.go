package capture

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

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
	tc, err := servers.NewTLSCert()
	if servers.IsNotInstalled(err) {
		t.Skipf("skipped: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Remove)
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
		t.Skip("skipped: no cgroup v2 hierarchy mounted")
	}
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54350})
	pid, err := pg.PID()
	if err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(roots[0], "cistern-capture-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("skipped: cannot create a cgroup: %v", err)
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
