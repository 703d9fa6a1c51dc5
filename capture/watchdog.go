package capture

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The --hold-new watchdog: a process of its own (this executable again,
// started with watchdogEnv set, caught by init below), holding the cap_held
// map and the read end of a pipe whose write end only the agent holds.
// When the pipe ends (the agent closed the capture, exited, crashed or was
// killed) it continues every process still in cap_held, three times over
// 0.6 s (a program still attached in the last moments of a dying agent may
// hold one more). While the agent lives it continues any process held
// longer than twice HoldMax plus a second (the agent's own timer does it
// at HoldMax; this is for an agent that is alive but stuck). It ignores
// the terminal's signals and runs in a session of its own, so a Ctrl-C
// meant for the agent does not end it first.

const watchdogEnv = "CISTERN_CAPTURE_WATCHDOG"

func init() {
	if v := os.Getenv(watchdogEnv); v != "" {
		os.Exit(runWatchdog(v))
	}
}

type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File
	done chan struct{}
}

func startWatchdog(held, sup *ebpf.Map, holdMax time.Duration) (*watchdog, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("hold watchdog: %w", err)
	}
	var files []*os.File
	for _, m := range []*ebpf.Map{held, sup} {
		nfd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, fmt.Errorf("hold watchdog: %w", err)
		}
		f := os.NewFile(uintptr(nfd), "map")
		defer f.Close()
		files = append(files, f)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self)
	cmd.Env = []string{watchdogEnv + "=" + strconv.FormatInt(int64(holdMax), 10)}
	cmd.ExtraFiles = []*os.File{files[0], r, files[1]} // fds 3 (cap_held), 4, 5 (cap_sup)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("hold watchdog: %w", err)
	}
	wd := &watchdog{cmd: cmd, pipe: w, done: make(chan struct{})}
	go func() { cmd.Wait(); close(wd.done) }()
	return wd, nil
}

// stop ends the watchdog (after its last sweep) and reaps it.
func (wd *watchdog) stop() {
	wd.pipe.Close()
	select {
	case <-wd.done:
	case <-time.After(3 * time.Second):
		wd.cmd.Process.Kill()
		<-wd.done
	}
}

func runWatchdog(arg string) int {
	signal.Ignore(unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGPIPE)
	holdMax, _ := strconv.ParseInt(arg, 10, 64)
	m, err := ebpf.NewMapFromFD(3)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cistern capture watchdog: %v\n", err)
		return 1
	}
	sup, err := ebpf.NewMapFromFD(5)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cistern capture watchdog: %v\n", err)
		return 1
	}
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.NewFile(4, "agent"))
		close(gone)
	}()
	supSeen := map[uint32]time.Time{} // supervisors pending, when first seen
	sweep := func(olderThan int64) {
		now := monotonicNS()
		var pid uint32
		var since uint64
		var due []uint32
		it := m.Iterate()
		for it.Next(&pid, &since) {
			if olderThan < 0 || now-int64(since) > olderThan {
				due = append(due, pid)
			}
		}
		for _, p := range due {
			if m.Delete(p) == nil {
				unix.Kill(int(p), unix.SIGCONT)
			}
		}
		if olderThan < 0 {
			continueSupervisors(sup, m, nil)
			return
		}
		// While the agent lives its hold timer continues supervisors (and
		// counts them); this only catches one it left for a while.
		now2 := time.Now()
		continueSupervisors(sup, m, func(parent uint32) bool {
			first, ok := supSeen[parent]
			if !ok {
				supSeen[parent] = now2
				return false
			}
			return now2.Sub(first) > time.Duration(2*holdMax)+time.Second
		})
		for p, first := range supSeen {
			if now2.Sub(first) > time.Duration(4*holdMax)+2*time.Second {
				delete(supSeen, p) // continued by the agent long ago (or by us)
			}
		}
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			sweep(2*holdMax + int64(time.Second))
			continue
		case <-gone:
		}
		break
	}
	for _, d := range []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond} {
		time.Sleep(d)
		sweep(-1)
	}
	return 0
}

// continueSupervisors continues the parents that stopped themselves when a
// child of theirs was held (cap_sup: su, runuser and sudo pass a child's
// stop on to themselves) once that child is no longer held (held) and
// ready says so (nil: every one, held child or not). As in cap_held, the
// entry is the token: whoever deletes it sends the SIGCONT. Returns how
// many it continued.
func continueSupervisors(sup, held *ebpf.Map, ready func(parent uint32) bool) int {
	var parent, child uint32
	var due []uint32
	var since uint64
	it := sup.Iterate()
	for it.Next(&parent, &child) {
		if ready == nil || (held.Lookup(child, &since) != nil && ready(parent)) {
			due = append(due, parent)
		}
	}
	n := 0
	for _, p := range due {
		if sup.Delete(p) == nil {
			unix.Kill(int(p), unix.SIGCONT)
			n++
		}
	}
	return n
}
