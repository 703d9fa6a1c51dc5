// Package thread holds what Cistern's agents do to the OS thread they run
// on.
package thread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Urgent locks the calling goroutine to its OS thread and raises that
// thread to nice -10 (best effort: it needs CAP_SYS_NICE), for loops that
// must keep ahead of the workload they serve: an agent that evicts before
// the kernel reclaims, a drainer that applies events before a reserve runs
// out. Linux keeps a nice value per thread, so only this thread changes.
// The returned function undoes both; call it on the same goroutine.
func Urgent() (undo func()) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	old, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	unix.Setpriority(unix.PRIO_PROCESS, tid, -10)
	return func() {
		if err == nil {
			// getpriority(2) returns 20 - nice
			unix.Setpriority(unix.PRIO_PROCESS, tid, 20-old)
		}
		runtime.UnlockOSThread()
	}
}
