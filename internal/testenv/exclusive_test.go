package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/mounts"
)

// TestExclusiveHolds checks the lock is really held until Cleanup: another
// open file description (as another test process would have) cannot take it
// while the subtest runs, and can once the subtest ended.
func TestExclusiveHolds(t *testing.T) {
	const r Resource = "selftest"
	path := filepath.Join(mounts.LockDir(), "cistern-test-selftest.lock")
	try := func() error {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	t.Run("held", func(t *testing.T) {
		Exclusive(t, r)
		if err := try(); err != syscall.EWOULDBLOCK {
			t.Fatalf("second flock while held: %v, want EWOULDBLOCK", err)
		}
	})
	if err := try(); err != nil {
		t.Fatalf("flock after the holder's cleanup: %v", err)
	}
}
