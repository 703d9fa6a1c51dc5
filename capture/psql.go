package capture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/cistern-ebpf/cistern/accum"
)

// PsqlRun is what CapturePsql or CaptureClient saw.
type PsqlRun struct {
	Queries  []Query
	Stats    accum.Stats
	Gaps     []accum.Gap
	Output   string // the client's own output
	BadBytes uint64 // protocol bytes the parser skipped
	Open     int    // connections whose end the capture has not seen
}

// CapturePsql starts psql (path) on conninfo, sends the statements one per
// line, and collects the captured queries until psql has exited and the
// channel is idle. With no selection in opt it captures psql itself,
// attaching once psql has mapped libssl (at once with TransportPlain);
// otherwise what opt selects (a server's postmaster and children, a
// cgroup), attached before psql starts. Tests, the demo and benchmarks
// share it.
func CapturePsql(psqlPath, conninfo string, statements []string, opt Options) (*PsqlRun, error) {
	return CaptureClient(exec.Command(psqlPath, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=0", conninfo), statements, opt)
}

// CaptureClient is CapturePsql for any client (cmd, not started yet) that
// reads statements one per line on its standard input (psql, mariadb).
func CaptureClient(cl *exec.Cmd, statements []string, opt Options) (*PsqlRun, error) {
	self := opt.PID == 0 && opt.Cgroup == "" && !opt.All
	// Capturing the client itself over plain sockets: the client waits, in
	// a shell that execs it (same pid), for one line on its standard input,
	// written once the capture is attached. Else a slow machine may attach
	// after it connected and sent its first bytes, and raw mode, which
	// takes the side that speaks first for the requester, would see the
	// server's greeting first.
	gated := self && opt.Transport == TransportPlain
	if gated {
		w := exec.Command("/bin/sh", append([]string{"-c", `read -r _ && exec "$@"`, "sh", cl.Path}, cl.Args[1:]...)...)
		w.Env, w.Dir = cl.Env, cl.Dir
		cl = w
	}
	var c *Capture
	if !self {
		var err error
		if c, err = Open(opt); err != nil {
			return nil, err
		}
		defer c.Close()
	}
	stdin, err := cl.StdinPipe()
	if err != nil {
		return nil, err
	}
	var out strings.Builder
	cl.Stdout, cl.Stderr = &out, &out
	if err := cl.Start(); err != nil {
		return nil, err
	}
	defer func() { cl.Process.Kill(); cl.Wait() }()

	// The client links libssl (psql through libpq): wait for the loader to map it.
	// The plain transport filters by pid in the kernel and needs no library.
	for deadline := time.Now().Add(10 * time.Second); self && opt.Transport != TransportPlain; {
		if _, err = FindLibSSL(cl.Process.Pid); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s never mapped libssl: %v (output %q)", cl.Path, err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if self {
		opt.PID = cl.Process.Pid
		if c, err = Open(opt); err != nil {
			return nil, err
		}
		defer c.Close()
	}

	go func() {
		if gated {
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				return
			}
		}
		for _, s := range statements {
			if _, err := io.WriteString(stdin, s+"\n"); err != nil {
				break
			}
		}
		stdin.Close()
	}()

	run := &PsqlRun{}
	done := make(chan error, 1)
	go func() { done <- cl.Wait() }()
	exited := false
	// Until the client exits, wait for it (a slow machine may take seconds
	// to start it and shake hands), up to a minute; then 2 s of quiet end
	// the capture.
	start := time.Now()
	for idle := time.Now(); (!exited && time.Since(start) < time.Minute) || time.Since(idle) < 2*time.Second; {
		qs, err := c.Next(100 * time.Millisecond)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if !exited {
				select {
				case <-done:
					exited = true
					idle = time.Now()
				default:
				}
			}
			if exited && len(run.Queries) >= len(statements) && len(c.conns) == 0 {
				break
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		run.Queries = append(run.Queries, qs...)
		idle = time.Now()
	}
	if run.Stats, err = c.Stats(); err != nil {
		return nil, err
	}
	run.Gaps = c.Gaps()
	run.Output = out.String()
	run.BadBytes = c.BadBytes()
	run.Open = len(c.conns)
	return run, nil
}
