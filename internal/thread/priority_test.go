package thread

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func nice(t *testing.T) int {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	return 20 - p
}

// TestUrgent: the thread runs at nice -10 in between, and at its old nice
// value after.
func TestUrgent(t *testing.T) {
	testenv.RequireRoot(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the same thread before, during and after
		defer runtime.UnlockOSThread()
		before := nice(t)
		undo := Urgent()
		if n := nice(t); n != -10 {
			t.Errorf("nice %d inside, want -10", n)
		}
		undo()
		if n := nice(t); n != before {
			t.Errorf("nice %d after, want %d again", n, before)
		}
	}()
	<-done
}
