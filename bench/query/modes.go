package querybench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cistern-ebpf/cistern/bench/queryref"
)

// The two queries, as the optimizer and mvsf_only modes run them. The
// cgroup filter is the one every mode applies (see docs/query-bench.md).
const (
	sqlQ1 = "SELECT pid, syscall, MAX(latency_ns) AS max_latency_ns FROM syscalls WHERE cgroup_id = %d GROUP BY pid, syscall WINDOW 1s"
	sqlQ2 = "SELECT pid, tid, syscall, latency_ns FROM syscalls WHERE cgroup_id = %d"
)

// bpftrace scripts for the same queries (bpftrace 0.17). @ev counts Q1's
// aggregated syscalls; Q2's events are the lines it prints.
const (
	btQ1 = `BEGIN { printf("ready\n"); }
tracepoint:raw_syscalls:sys_enter /cgroup == %[1]d/ { @s[tid] = nsecs; @n[tid] = args->id; }
tracepoint:raw_syscalls:sys_exit /cgroup == %[1]d && @s[tid]/ { @max[pid, @n[tid]] = max(nsecs - @s[tid]); @ev = count(); delete(@s[tid]); }
interval:s:1 { print(@max); clear(@max); }
END { clear(@s); clear(@n); }`
	btQ2 = `BEGIN { printf("ready\n"); }
tracepoint:raw_syscalls:sys_enter /cgroup == %[1]d/ { @s[tid] = nsecs; @n[tid] = args->id; }
tracepoint:raw_syscalls:sys_exit /cgroup == %[1]d && @s[tid]/ { printf("%%d,%%d,%%d,%%d\n", pid, tid, @n[tid], nsecs - @s[tid]); delete(@s[tid]); }
END { clear(@s); clear(@n); }`
)

// maxKey is a Q1 group, the syscall by name (what the SQL schema reports).
type maxKey struct {
	pid     uint32
	syscall string
}

// modeRun is what a mode reports for one traced fio run.
type modeRun struct {
	events, lost uint64
	maxima       map[maxKey]uint64 // Q1: per key, the max over every window
	plan         string            // optimizer/mvsf_only: the chosen plan
}

func (r *modeRun) merge(k maxKey, v uint64) {
	if r.maxima == nil {
		r.maxima = map[maxKey]uint64{}
	}
	r.maxima[k] = max(r.maxima[k], v)
}

// stopFunc ends a mode's tracing and returns what it saw.
type stopFunc func() (modeRun, error)

// startMode attaches mode for query q ("q1" or "q2") to the cgroup and
// returns once it traces. Q2 writes its rows to out.
func startMode(ctx context.Context, mode, q string, cg *queryref.Cgroup, out string) (stopFunc, error) {
	switch mode {
	case "hand_written":
		return startHand(q, cg, out)
	case "bpftrace":
		return startBpftrace(ctx, q, cg, out)
	case "optimizer", "mvsf_only":
		return startEngine(ctx, mode, q, cg, out)
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

func startHand(q string, cg *queryref.Cgroup, out string) (stopFunc, error) {
	query := queryref.Q1
	if q == "q2" {
		query = queryref.Q2
	}
	tr, err := queryref.Open(queryref.Config{Query: query, CgroupID: cg.ID})
	if err != nil {
		return nil, err
	}
	var r modeRun
	if query == queryref.Q1 {
		done, exited := make(chan struct{}), make(chan error, 1)
		window := func() error {
			w, err := tr.Window()
			for k, v := range w {
				r.merge(maxKey{k.PID, queryref.SyscallName(k.NR)}, v)
			}
			return err
		}
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					exited <- nil
					return
				case <-t.C:
					if err := window(); err != nil {
						exited <- err
						return
					}
				}
			}
		}()
		return func() (modeRun, error) {
			defer tr.Close()
			close(done)
			if err := <-exited; err != nil {
				return r, err
			}
			tr.Detach()
			if err := window(); err != nil {
				return r, err
			}
			st, err := tr.Stats()
			r.events, r.lost = st.Events, st.NoStart+st.Full
			return r, err
		}, nil
	}
	f, err := os.Create(out)
	if err != nil {
		tr.Close()
		return nil, err
	}
	stop, drained := make(chan struct{}), make(chan error, 1)
	var lines uint64
	go func() {
		var err error
		lines, err = tr.Drain(f, stop)
		drained <- err
	}()
	return func() (modeRun, error) {
		defer tr.Close()
		defer f.Close()
		tr.Detach()
		close(stop)
		if err := <-drained; err != nil {
			return r, err
		}
		st, err := tr.Stats()
		r.events, r.lost = lines, st.Lost+st.NoStart
		if err == nil && lines != st.Events {
			err = fmt.Errorf("hand_written wrote %d lines for %d records", lines, st.Events)
		}
		return r, err
	}, nil
}

var (
	reBtMax  = regexp.MustCompile(`^@max\[(\d+), (\d+)\]: (\d+)$`)
	reBtEv   = regexp.MustCompile(`^@ev: (\d+)$`)
	reBtLost = regexp.MustCompile(`Lost (\d+) events`)
)

func startBpftrace(ctx context.Context, q string, cg *queryref.Cgroup, out string) (stopFunc, error) {
	bin, err := exec.LookPath("bpftrace")
	if err != nil {
		return nil, errSkip{"bpftrace not installed"}
	}
	script := fmt.Sprintf(btQ2, cg.ID)
	if q == "q1" {
		script = fmt.Sprintf(btQ1, cg.ID)
	}
	// As `bpftrace -e SCRIPT > FILE` (its -o buffers even the ready line):
	// stdout is copied to the Q2 file, or parsed for Q1.
	var (
		bw   *bufio.Writer
		file *os.File
	)
	if q == "q2" {
		if file, err = os.Create(out); err != nil {
			return nil, err
		}
		bw = bufio.NewWriterSize(file, 1<<20)
	}
	cmd := exec.CommandContext(ctx, bin, "-e", script)
	stdout, err := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		if file != nil {
			file.Close()
		}
		return nil, err
	}
	var r modeRun
	ready, copied := make(chan struct{}), make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(stdout, 1<<20)
		isReady := false
		for {
			line, err := br.ReadSlice('\n')
			if !isReady {
				if string(line) == "ready\n" {
					isReady = true
					close(ready)
				}
			} else if bw != nil && len(line) > 0 && line[0] >= '0' && line[0] <= '9' {
				if _, werr := bw.Write(line); werr != nil {
					io.Copy(io.Discard, br) // let bpftrace finish
					copied <- errors.Join(werr, file.Close())
					return
				}
			} else {
				btLine(&r, strings.TrimRight(string(line), "\n"))
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil {
				if bw != nil {
					copied <- errors.Join(bw.Flush(), file.Close())
				} else {
					copied <- nil
				}
				return
			}
		}
	}()
	exited := make(chan error, 1)
	go func() {
		err := <-copied // stdout drained before Wait closes it
		exited <- errors.Join(err, cmd.Wait())
	}()
	select {
	case <-ready:
	case err := <-exited:
		return nil, fmt.Errorf("bpftrace: %v: %s", err, lastLine(stderr.String()))
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("bpftrace did not attach in 60s: %s", lastLine(stderr.String()))
	}
	return func() (modeRun, error) {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-exited:
			if err != nil {
				return r, fmt.Errorf("bpftrace: %v: %s", err, lastLine(stderr.String()))
			}
		case <-time.After(2 * time.Minute): // it drains its buffers first: slow on a loaded machine
			cmd.Process.Kill()
			<-exited
			return r, errors.New("bpftrace did not exit within 2 minutes of SIGINT")
		}
		for _, m := range reBtLost.FindAllStringSubmatch(stderr.String(), -1) {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			r.lost += n
		}
		// Q2's events are counted from the file by the caller, like every mode's.
		return r, nil
	}, nil
}

// btLine takes one line of bpftrace's output other than Q2's rows.
func btLine(r *modeRun, l string) {
	if m := reBtLost.FindStringSubmatch(l); m != nil {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		r.lost += n
	} else if m := reBtMax.FindStringSubmatch(l); m != nil {
		pid, _ := strconv.ParseUint(m[1], 10, 32)
		nr, _ := strconv.ParseUint(m[2], 10, 32)
		v, _ := strconv.ParseUint(m[3], 10, 64)
		r.merge(maxKey{uint32(pid), queryref.SyscallName(uint32(nr))}, v)
	} else if m := reBtEv.FindStringSubmatch(l); m != nil {
		r.events, _ = strconv.ParseUint(m[1], 10, 64)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// errSkip is a mode that cannot run here (a missing tool or API); the bench
// notes it and goes on.
type errSkip struct{ why string }

func (e errSkip) Error() string { return e.why }

// jsonRows parses Q1's --format json output, one object per line.
type jsonRows struct {
	rest []byte
	r    *modeRun
	err  error
}

func (j *jsonRows) Write(p []byte) (int, error) {
	j.rest = append(j.rest, p...)
	for {
		i := bytes.IndexByte(j.rest, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := bytes.TrimSpace(j.rest[:i])
		j.rest = j.rest[i+1:]
		if len(line) == 0 {
			continue
		}
		var row map[string]any
		d := json.NewDecoder(bytes.NewReader(line))
		d.UseNumber()
		if err := d.Decode(&row); err != nil {
			j.err = fmt.Errorf("Q1 row not JSON: %.100s", line)
			continue
		}
		pid, ok1 := jsonUint(row["pid"])
		v, ok2 := jsonUint(row["max_latency_ns"])
		name, ok3 := row["syscall"].(string)
		if !ok1 || !ok2 || !ok3 {
			j.err = fmt.Errorf("Q1 row lacks pid, syscall or max_latency_ns: %.100s", line)
			continue
		}
		j.r.merge(maxKey{uint32(pid), syscallKey(name)}, v)
	}
}

// syscallKey names a syscall the way the reference does: a tool that
// prints a number it has no name for (335, uretprobe, is newer than the
// UAPI headers) gets the reference's name for that number.
func syscallKey(name string) string {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return queryref.SyscallName(uint32(n))
	}
	return name
}

func jsonUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseUint(x.String(), 10, 64)
		return n, err == nil
	case string:
		n, err := strconv.ParseUint(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// engineWarmup is how long to wait for OnLoaded before starting anyway.
const engineWarmup = 5 * time.Second

func startEngine(ctx context.Context, mode, q string, cg *queryref.Cgroup, out string) (stopFunc, error) {
	var r modeRun
	opt := engineOptions{Duration: time.Hour, Mode: mode}
	sql := fmt.Sprintf(sqlQ1, cg.ID)
	rows := &jsonRows{r: &r}
	var file *os.File
	if q == "q2" {
		sql = fmt.Sprintf(sqlQ2, cg.ID)
		var err error
		if file, err = os.Create(out); err != nil {
			return nil, err
		}
		opt.Out, opt.Format = file, "csv"
	} else {
		opt.Out, opt.Format = rows, "json"
	}
	// Not --explain: its BPF run-time statistics would slow every program
	// on the machine, the hand-written reference's too.
	ready := make(chan struct{})
	var once sync.Once
	opt.OnLoaded = func() { once.Do(func() { close(ready) }) }
	qctx, cancel := context.WithCancel(ctx)
	type result struct {
		res *engineResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := runQuery(qctx, sql, opt)
		done <- result{res, err}
	}()
	fail := func(err error) (stopFunc, error) {
		cancel()
		if file != nil {
			file.Close()
		}
		return nil, err
	}
	select {
	case <-ready:
	case <-time.After(engineWarmup):
	case res := <-done:
		return fail(fmt.Errorf("%s ended before the workload: %v", mode, res.err))
	}
	return func() (modeRun, error) {
		cancel()
		res := <-done
		if file != nil {
			file.Close()
		}
		if res.res == nil {
			return r, fmt.Errorf("%s: %v", mode, res.err)
		}
		if res.err != nil && !errors.Is(res.err, context.Canceled) {
			return r, fmt.Errorf("%s: %v", mode, res.err)
		}
		if rows.err != nil {
			return r, rows.err
		}
		r.events, r.lost, r.plan = res.res.Events, res.res.LostEvents, res.res.Plan
		return r, nil
	}, nil
}

// q2Count counts a Q2 file's data rows, and the pread64 rows of fio's job
// (any pid but fio's parent), which must equal fio's own read count; with
// only, the rows of every read syscall of pid fioParent itself (db_bench,
// against its syscr).
func q2Count(path string, fioParent int, only bool) (rows, preads uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	parent := strconv.Itoa(fioParent)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			var fields [4][]byte
			n := 0
			for rest := bytes.TrimRight(line, "\r\n"); n < 4; n++ {
				i := bytes.IndexByte(rest, ',')
				if i < 0 {
					fields[n] = rest
					n++
					break
				}
				fields[n], rest = rest[:i], rest[i+1:]
			}
			if n == 4 && isDigits(fields[0]) && isDigits(fields[3]) {
				rows++
				sc := string(bytes.Trim(fields[2], `"`))
				switch {
				case only:
					if string(fields[0]) == parent && readSyscalls[sc] {
						preads++
					}
				case sc == "pread64" || sc == "17": // bpftrace prints the number
					if string(fields[0]) != parent {
						preads++
					}
				}
			}
		}
		if err == io.EOF {
			return rows, preads, nil
		}
		if err != nil {
			return rows, preads, err
		}
	}
}

// readSyscalls are the syscalls /proc/PID/io's syscr counts that db_bench
// makes, by name and by number (bpftrace's).
var readSyscalls = map[string]bool{"read": true, "0": true, "pread64": true, "17": true, "readv": true, "19": true,
	"preadv": true, "295": true, "preadv2": true, "327": true}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
