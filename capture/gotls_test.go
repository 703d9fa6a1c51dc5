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

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// buildPGClient builds internal/testprogs/pgclient (lib/pq over Go's
// crypto/tls), stripped of its symbol table and DWARF when strip is set.
// CISTERN_PGCLIENT_DIR names a directory holding the builds already
// (pgclient-symtab, pgclient-stripped, ...): an emulated kernel-matrix guest
// takes longer than a test's timeout to compile them.
func buildPGClient(t *testing.T, name string, strip bool) string {
	t.Helper()
	if dir := os.Getenv("CISTERN_PGCLIENT_DIR"); dir != "" {
		return filepath.Join(dir, name)
	}
	gobin := testenv.NeedTool(t, "go", "golang (Go 1.24 or newer), to build the Go TLS client")
	out := filepath.Join(t.TempDir(), name)
	args := []string{"build", "-o", out}
	if strip {
		args = append(args, "-ldflags=-s -w")
	}
	cmd := exec.Command(gobin, append(args, "./internal/testprogs/pgclient")...)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, b)
	}
	return out
}

// TestFindGoTLS: the functions and their RETs are found from the symbol
// table, and from .gopclntab alone in a stripped build, at the same places.
func TestFindGoTLS(t *testing.T) {
	plain := buildPGClient(t, "pgclient", false)
	stripped := buildPGClient(t, "pgclient-stripped", true)
	g, err := findGoTLS(plain)
	if err != nil {
		t.Fatal(err)
	}
	s, err := findGoTLS(stripped)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("symtab: %+v", g)
	t.Logf("pclntab: %+v", s)
	// The entry probes sit past the stack check (prologueEnd), right after
	// its JBE: a probe at the entry fires again when morestack reruns it.
	for _, off := range []uint64{g.write, g.read} {
		b := make([]byte, 6)
		if fh, err := os.Open(plain); err == nil {
			fh.ReadAt(b, int64(off)-6)
			fh.Close()
		}
		if !(b[0] == 0x0f && b[1] == 0x86) && b[4] != 0x76 {
			t.Errorf("probe at %#x does not follow a JBE (bytes before it: % x)", off, b)
		}
	}
	if g.fromPclntab || !s.fromPclntab {
		t.Errorf("fromPclntab: unstripped %v, stripped %v", g.fromPclntab, s.fromPclntab)
	}
	if g.write == 0 || g.read == 0 || len(g.writeRets) == 0 || len(g.readRets) == 0 {
		t.Fatalf("unstripped: %+v", g)
	}
	if g.handshake == 0 || len(g.handshakeRets) == 0 || len(s.handshakeRets) != len(g.handshakeRets) {
		t.Errorf("handshakeContext: unstripped %#x %v, stripped %#x %v", g.handshake, g.handshakeRets, s.handshake, s.handshakeRets)
	}
	if len(s.writeRets) != len(g.writeRets) || len(s.readRets) != len(g.readRets) {
		t.Errorf("RETs differ between the builds: %v/%v and %v/%v", g.writeRets, g.readRets, s.writeRets, s.readRets)
	}
	if _, err := findGoTLS("/bin/sh"); !errors.Is(err, errNotGoTLS) {
		t.Errorf("/bin/sh: %v, want errNotGoTLS", err)
	}
	for _, v := range []struct {
		v  string
		ok bool
	}{{"go1.16.15", false}, {"go1.17", true}, {"go1.26.8", true}, {"go1.21rc1", true}, {"go2.0", true}} {
		if goABIRegs(v.v) != v.ok {
			t.Errorf("goABIRegs(%s) = %v", v.v, !v.ok)
		}
	}
}

// TestCaptureGoTLS: a Go program (lib/pq) holds a TLS connection (Go's
// crypto/tls) and a plaintext one to PostgreSQL at once; every query of
// each is captured exactly once, the TLS ones with library go, from the
// symbol table and, in a stripped build, from .gopclntab.
func TestCaptureGoTLS(t *testing.T) {
	testenv.RequireRoot(t)
	tc := testenv.TLSCert(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54354, Conf: tc.PostgresConf()})
	for _, v := range []struct {
		name     string
		strip    bool
		children bool
	}{{"symtab", false, false}, {"stripped", true, true}} {
		t.Run(v.name, func(t *testing.T) {
			bin := buildPGClient(t, "pgclient-"+v.name, v.strip)
			checkGoClient(t, pg, bin, v.children)
		})
	}
}

func checkGoClient(t *testing.T, pg *servers.Postgres, bin string, children bool) {
	const n = 30
	tok := strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd := exec.Command(bin, "-port", strconv.Itoa(pg.Opt.Port), "-n", strconv.Itoa(n), "-tok", tok)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	c, err := Open(Options{PID: cmd.Process.Pid, Children: children})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cn, _ := c.Counters()
	if cn["go_binaries_attached"] != 1 {
		t.Fatalf("Go binaries attached: %d (%s)", cn["go_binaries_attached"], c.LastAttachError())
	}
	stdin.Write([]byte("go\n"))
	got := map[string][]Query{}
	exited := false
	for idle, end := time.Now(), time.Now().Add(time.Minute); time.Now().Before(end); {
		qs, err := c.Next(100 * time.Millisecond)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
		for _, q := range qs {
			if i := strings.Index(q.Query, "'g-"+tok+"-"); i >= 0 {
				m := strings.TrimSuffix(strings.Fields(q.Query[i+1:])[0], "'")
				got[m] = append(got[m], q)
			}
		}
		if len(qs) > 0 {
			idle = time.Now()
		}
		if !exited {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v: %s", bin, err, out.String())
				}
				exited, idle = true, time.Now()
			default:
			}
		}
		if exited && time.Since(idle) > 2*time.Second {
			break
		}
	}
	if !exited {
		t.Fatal("the Go client did not finish in a minute")
	}
	st, _ := c.Stats()
	t.Logf("channel: %+v; gaps %d; skipped %d", st, len(c.Gaps()), c.BadBytes())
	comm := filepath.Base(bin)
	if len(comm) > 15 {
		comm = comm[:15]
	}
	bad := 0
	for _, mode := range []string{"tls", "plain"} {
		for i := 0; i < n; i++ {
			m := fmt.Sprintf("g-%s-%s-%d", tok, mode, i)
			qs := got[m]
			if len(qs) != 1 {
				t.Errorf("%s captured %d times, want once", m, len(qs))
				bad++
				continue
			}
			q := qs[0]
			lib := map[string]string{"tls": "go", "plain": "none"}[mode]
			if q.Transport != mode || q.Library != lib || q.Side != SideClient || q.Comm != comm || q.Rows != 1 ||
				q.Remote != pg.Addr() || !strings.HasPrefix(q.Local, "127.0.0.1:") {
				t.Errorf("%s: transport %q library %q side %q comm %q rows %d local %q remote %q", m,
					q.Transport, q.Library, q.Side, q.Comm, q.Rows, q.Local, q.Remote)
			}
		}
	}
	if st.LostRecords != 0 || len(c.Gaps()) != 0 || c.BadBytes() != 0 {
		t.Errorf("loss or unparseable bytes: %+v, gaps %v, skipped %d", st, c.Gaps(), c.BadBytes())
	}
}
