// Package testenv is the harness of Cistern's tests: root checks, network
// namespaces that always go away, and real servers started for one test.
package testenv

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/rlimit"

	"github.com/cistern-ebpf/cistern/internal/mounts"
	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/vm"
)

// NeedServers skips a test that talks to a real server (memcached,
// PostgreSQL, MariaDB) when CISTERN_SKIP_SERVERS=1: the fast kernel matrix
// runs the tests that need none, `make kernel-matrix FULL=1` runs them all.
func NeedServers(t testing.TB) {
	t.Helper()
	if os.Getenv("CISTERN_SKIP_SERVERS") == "1" {
		t.Skip("skipped: needs a real server; CISTERN_SKIP_SERVERS=1 (the fast kernel matrix) leaves server tests to the full run") // not a missing tool: chosen by the caller
	}
}

// RequireRoot skips the test, naming the capability, unless run as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if RequireAll() {
			t.Fatal("needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN), and CISTERN_REQUIRE_ALL=1 makes that a failure: run sudo make test")
		}
		t.Skip("skipped: needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN); run sudo make test") // not a missing tool: root, failed above under CISTERN_REQUIRE_ALL
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("remove memlock: %v", err)
	}
	for _, fs := range []mounts.FS{mounts.Tracefs, mounts.BPFFS} {
		if _, err := mounts.Ensure(fs); err != nil {
			t.Fatal(err)
		}
	}
}

var subnet atomic.Uint32

// NetPair creates a server and a client namespace joined by veth, removed
// when the test ends. name must be at most 8 characters and unique per test.
func NetPair(t testing.TB, name string) *netenv.Pair {
	t.Helper()
	RequireRoot(t)
	sn := uint8(10 + subnet.Add(1)%200)
	p, err := netenv.NewPair(name, netenv.Options{Subnet: sn})
	if err != nil {
		t.Fatalf("network namespaces: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("cleanup namespaces: %v", err)
		}
	})
	return p
}

// Memcached starts a real memcached for the test and stops it after.
func Memcached(t testing.TB, opt servers.MemcachedOptions) *servers.Memcached {
	t.Helper()
	NeedServers(t)
	if opt.StartTimeout == 0 {
		opt.StartTimeout = StartTimeout(10 * time.Second)
	}
	m, err := servers.StartMemcached(opt)
	if err != nil {
		NotInstalled(t, err)
		t.Fatalf("memcached: %v", err)
	}
	t.Cleanup(func() { m.Stop() })
	return m
}

// Prometheus starts a Prometheus server scraping opt.Targets, stopped with
// the test.
func Prometheus(t testing.TB, opt servers.PrometheusOptions) *servers.Prometheus {
	t.Helper()
	NeedServers(t)
	p, err := servers.StartPrometheus(opt)
	if err != nil {
		NotInstalled(t, err)
		t.Fatalf("prometheus: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// TLSCert makes a CA and a server certificate for the test (removed
// after); it skips the test when openssl is not installed.
func TLSCert(t testing.TB) *servers.TLSCert {
	t.Helper()
	NeedServers(t)
	tc, err := servers.NewTLSCert()
	if err != nil {
		NotInstalled(t, err)
		t.Fatalf("tls certificate: %v", err)
	}
	t.Cleanup(tc.Remove)
	return tc
}

// Postgres starts a real PostgreSQL for the test and stops it after.
func Postgres(t testing.TB, opt servers.PostgresOptions) *servers.Postgres {
	t.Helper()
	NeedServers(t)
	// The fixed ports keep the packages of one `go test ./...` apart; a
	// port held by something else on this machine (another checkout's
	// test run) is replaced by a free one: tests use pg.Opt.Port.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(opt.Port)), time.Second); err == nil {
		c.Close()
		if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
			t.Logf("postgres: port %d is in use on this machine; using %d", opt.Port, l.Addr().(*net.TCPAddr).Port)
			opt.Port = l.Addr().(*net.TCPAddr).Port
			l.Close()
		}
	}
	if opt.StartTimeout == 0 {
		opt.StartTimeout = StartTimeout(30 * time.Second) // widened in a guest and under load
	}
	p, err := servers.StartPostgres(opt)
	if err != nil {
		NotInstalled(t, err)
		t.Fatalf("postgres: %v", err)
	}
	pid, _ := p.PID()
	t.Cleanup(func() {
		// A postmaster gone before the end fails the test's clients with
		// "connection refused" and nothing else: say so, with its log.
		if pid > 0 && syscall.Kill(pid, 0) != nil {
			t.Errorf("postgres on port %d (postmaster pid %d) exited before the test ended; its log:\n%s", opt.Port, pid, lastLines(p.Log(), 30))
		}
		p.Stop()
	})
	return p
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TimeScale is the factor by which a test widens its timing bounds: 1 on
// real hardware, 10 inside the kernel matrix's emulated (qemu TCG) guests,
// which run ~10-30x slower. Only bounds on elapsed time may use it; what a
// test checks (a flush happened, a record arrived) stays the same.
func TimeScale() time.Duration {
	if vm.InGuest() {
		return 10
	}
	return 1
}
