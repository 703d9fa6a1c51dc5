package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/mounts"
)

// Resource names a machine-wide resource that tests in different packages
// (go test runs packages in parallel, `-p 2` in CI) must not use at once.
type Resource string

// Traffic is the host's loopback and veth traffic as a whole. A test that
// captures every process (`capture --all`, capture.Options{All}) sees every
// other package's loopback traffic, and a test that floods loopback or a veth
// (kv benches, loadgen, capture churn) fills the rings and socket buffers of
// whatever else runs. Both take Traffic exclusively, so a whole-machine
// capture never runs beside a flood, and two floods never share the 2 cores.
const Traffic Resource = "traffic"

// Exclusive holds resource r for the rest of the test (released at Cleanup),
// waiting for other test processes of this machine that hold it. The lock is
// flock(2) on /run/lock/cistern-test-<r>.lock, so a killed test process
// releases it with its file descriptor. The wait is logged when it was long,
// so a slow test says why.
func Exclusive(t testing.TB, r Resource) {
	t.Helper()
	path := filepath.Join(mounts.LockDir(), fmt.Sprintf("cistern-test-%s.lock", r))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("testenv.Exclusive(%s): %v", r, err)
	}
	t0 := time.Now()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		t.Fatalf("testenv.Exclusive(%s): flock %s: %v", r, path, err)
	}
	if w := time.Since(t0); w > time.Second {
		t.Logf("testenv.Exclusive(%s): waited %v for another test process", r, w.Round(time.Millisecond))
	}
	t.Cleanup(func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// StartTimeout bounds the wait for a daemon the test started (a `cistern`
// subcommand loading BPF, an agent, a server) to say it is ready. base is
// the bound on an idle machine; it is widened by TimeScale and by the load
// average per CPU (loading and verifying BPF is CPU-bound: with 3 runnable
// tasks per core it takes ~3x as long), at most 10x on top of TimeScale.
func StartTimeout(base time.Duration) time.Duration {
	f := 1.0
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		var l1 float64
		if _, err := fmt.Sscanf(string(b), "%f", &l1); err == nil {
			if per := l1 / float64(runtime.NumCPU()); per > 1 {
				f = per
			}
		}
	}
	if f > 10 {
		f = 10
	}
	return time.Duration(float64(base)*f) * TimeScale()
}
