package query

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/query/plan"
)

// loaded signals the first write to Explain: the plan is attached.
type loaded struct {
	once sync.Once
	ch   chan struct{}
	buf  bytes.Buffer
	mu   sync.Mutex
}

func (l *loaded) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	l.once.Do(func() { close(l.ch) })
	return len(p), nil
}

// during runs sql, runs work once the plan is loaded, then stops the query.
func during(t *testing.T, sql string, opt Options, work func()) (*Result, string, string) {
	t.Helper()
	ex := &loaded{ch: make(chan struct{})}
	var out bytes.Buffer
	opt.Out, opt.Explain = &out, ex
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var res *Result
	var err error
	done := make(chan struct{})
	go func() {
		res, err = Run(ctx, sql, opt)
		close(done)
	}()
	select {
	case <-ex.ch:
	case <-done:
		t.Fatalf("%s: %v", sql, err)
	}
	time.Sleep(50 * time.Millisecond) // the explain is written before the loop starts
	work()
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return res, out.String(), ex.buf.String()
}

func dd(t *testing.T, n int) {
	t.Helper()
	cmd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1", "status=none", "count="+itoa(n))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestCountsAgreeAcrossPlans: dd makes exactly count reads of one byte;
// the kernel-aggregated plan and the MVSF plan count the same calls.
func TestCountsAgreeAcrossPlans(t *testing.T) {
	testenv.RequireRoot(t)
	const n = 20000
	sql := "SELECT syscall, COUNT(*) AS calls, MAX(latency_ns) AS worst, MIN(latency_ns) AS best FROM syscalls WHERE comm = 'dd' AND syscall IN ('read', 'write') AND arg2 = 1 GROUP BY syscall ORDER BY syscall"
	for _, mode := range []string{ModeOptimizer, ModeMVSFOnly} {
		res, out, explain := during(t, sql, Options{Mode: mode, Format: "json"}, func() { dd(t, n) })
		if mode == ModeOptimizer && !strings.Contains(res.Plan, "agg") {
			t.Errorf("optimizer chose %s, want kernel aggregation:\n%s", res.Plan, explain)
		}
		// MVSF sends every event on the machine to user space and may
		// drop some when the box is busy: then each missing call must be
		// counted as lost, never silently gone.
		if mode == ModeOptimizer && res.LostEvents != 0 {
			t.Fatalf("%s lost %d events", mode, res.LostEvents)
		}
		rows := map[string]any{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s: %q: %v", mode, line, err)
			}
			rows[m["syscall"].(string)] = m
			calls := m["calls"].(float64)
			// Counted losses: the ring or a map full, or runs the kernel
			// skipped (a preemptible 7.x kernel).
			if calls != n && (calls > n || float64(res.LostEvents+res.SkippedEvents) < n-calls) {
				t.Errorf("%s: %s calls = %v, want %d (lost %d, skipped %d)", mode, m["syscall"], calls, n, res.LostEvents, res.SkippedEvents)
			}
			if m["worst"].(float64) < m["best"].(float64) || m["best"].(float64) <= 0 {
				t.Errorf("%s: no latency", mode)
			}
		}
		if len(rows) != 2 || (res.LostEvents+res.SkippedEvents == 0 && res.Events != 2*n) {
			t.Errorf("%s: rows %v, events %d, want read and write, %d events\n%s", mode, rows, res.Events, 2*n, out)
		}
	}
}

// TestFallbackWhenRefused: if the verifier refuses the cheaper plans the
// optimizer keeps going down to MVSF-only, and --explain says so.
func TestFallbackWhenRefused(t *testing.T) {
	testenv.RequireRoot(t)
	sql := "SELECT COUNT(*) AS n FROM syscalls WHERE comm = 'dd'"
	refuse := map[string]bool{}
	for _, p := range []string{"join", "join+filter", "join+project", "join+filter+project", "join+filter+agg", "join+agg"} {
		refuse[p] = true
	}
	res, out, explain := during(t, sql, Options{Refuse: refuse, Format: "csv"}, func() { dd(t, 500) })
	if res.Plan != "mvsf" {
		t.Fatalf("plan %s, want mvsf\n%s", res.Plan, explain)
	}
	if !strings.Contains(explain, "refused by the verifier") || !strings.Contains(explain, "* mvsf") {
		t.Errorf("explain does not show the refusals:\n%s", explain)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || lines[0] != "n" || lines[1] < "1000" && len(lines[1]) < 4 {
		t.Errorf("csv output %q", out)
	}
}

// histBar is one bar line of the table format: range, count, bar of 52.
var histBar = regexp.MustCompile(`^(\(\.\.\., 0\]|\[1\]|\[(\d+[KMGTPE]?), (\d+[KMGTPE]?)\)) +(\d+) \|(@*)( *)\|$`)

// TestHistTableThroughKernel: dd's one-byte reads, histogrammed by the
// plan the optimizer picks (the kernel's per-CPU histograms when it
// aggregates there), print as bpftrace-style bars in the table format:
// a header naming the group, then consecutive buckets whose counts add up
// to the group's COUNT(*), the largest bar 52 columns wide. JSON has the
// same buckets as numbers.
func TestHistTableThroughKernel(t *testing.T) {
	testenv.RequireRoot(t)
	const n = 5000
	sql := "SELECT comm, syscall, COUNT(*) AS calls, HIST(latency_ns) AS lat FROM syscalls WHERE comm = 'dd' AND syscall = 'read' AND arg2 = 1 GROUP BY comm, syscall"
	res, out, explain := during(t, sql, Options{Format: "table"}, func() { dd(t, n) })
	t.Logf("plan %s\n%s", res.Plan, out)
	if !strings.Contains(res.Plan, "agg") {
		t.Logf("the optimizer did not aggregate in the kernel:\n%s", explain)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	m := regexp.MustCompile(`^comm=dd  syscall=read  calls=(\d+)$`).FindStringSubmatch(lines[0])
	if m == nil || len(lines) < 3 || lines[1] != "lat:" {
		t.Fatalf("want a block headed comm=dd  syscall=read  calls=N, then lat:, got\n%s", out)
	}
	calls, _ := strconv.ParseUint(m[1], 10, 64)
	if calls < n && res.LostEvents+res.SkippedEvents == 0 {
		t.Errorf("calls = %d, want >= %d", calls, n)
	}
	var sum uint64
	full, prevHi := false, ""
	for _, l := range lines[2:] {
		b := histBar.FindStringSubmatch(l)
		if b == nil || len(b[5])+len(b[6]) != 52 {
			t.Fatalf("not a bar line: %q\n%s", l, out)
		}
		if b[2] != "" && prevHi != "" && b[2] != prevHi {
			t.Fatalf("bucket %q does not follow the previous one (up to %s): gaps must be printed\n%s", l, prevHi, out)
		}
		prevHi = b[3]
		c, _ := strconv.ParseUint(b[4], 10, 64)
		sum += c
		full = full || len(b[5]) == 52
	}
	if sum != calls || !full || res.Rows != 1 {
		t.Fatalf("bucket counts add up to %d, want %d; a full bar: %v; rows %d\n%s", sum, calls, full, res.Rows, out)
	}

	res, out, _ = during(t, sql, Options{Format: "json"}, func() { dd(t, n) })
	var row struct {
		Calls uint64
		Lat   []struct{ Min, Max, Count uint64 }
	}
	if err := json.Unmarshal([]byte(out), &row); err != nil || len(row.Lat) == 0 {
		t.Fatalf("json %q: %v", out, err)
	}
	sum = 0
	for _, b := range row.Lat {
		sum += b.Count
		if b.Min > b.Max || (b.Min > 0 && b.Max != 2*b.Min-1) {
			t.Fatalf("bucket %+v is not a log2 bucket: %s", b, out)
		}
	}
	if sum != row.Calls || res.Rows != 1 {
		t.Fatalf("JSON buckets add up to %d, calls %d, rows %d: %s", sum, row.Calls, res.Rows, out)
	}
}

// TestExecFilenames reads process_exec through the kernel string filter.
func TestExecFilenames(t *testing.T) {
	testenv.RequireRoot(t)
	sql := "SELECT comm, filename, pid FROM process_exec WHERE comm = 'true'"
	res, out, _ := during(t, sql, Options{Format: "json"}, func() {
		for i := 0; i < 3; i++ {
			if err := exec.Command("true").Run(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if res.Rows < 3 || !strings.Contains(out, `"filename":"`) || !strings.Contains(out, "true\"") {
		t.Fatalf("rows %d:\n%s", res.Rows, out)
	}
}

// TestWindowedJSON: each window's rows carry window_end_ns.
func TestWindowedJSON(t *testing.T) {
	testenv.RequireRoot(t)
	var out bytes.Buffer
	png := filepath.Join(t.TempDir(), "n.png")
	res, err := Run(context.Background(), "SELECT COUNT(*) AS n FROM sched_switch WINDOW 100ms", Options{Duration: 450 * time.Millisecond, Out: &out, Format: "json", Plot: png})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Errorf("--plot wrote no chart: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 4 || res.Rows != len(lines) {
		t.Fatalf("%d windows (rows %d):\n%s", len(lines), res.Rows, out.String())
	}
	var prev float64
	for _, l := range lines {
		var m map[string]float64
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["window_end_ns"] <= prev {
			t.Fatalf("window_end_ns not increasing: %s", out.String())
		}
		prev = m["window_end_ns"]
	}
}

// TestLimitStopsStreaming: a streaming query ends as soon as LIMIT rows
// are out. A child makes the syscalls: the query never sees its own
// process, and a quiet CI container may have no other busy process.
func TestLimitStopsStreaming(t *testing.T) {
	testenv.RequireRoot(t)
	var out bytes.Buffer
	start := time.Now()
	child := exec.Command("sh", "-c", "while :; do sleep 0.05; done")
	opt := Options{Duration: 20 * time.Second, Out: &out, OnLoaded: func() {
		if err := child.Start(); err != nil {
			t.Error(err)
		}
	}}
	defer func() {
		if child.Process != nil {
			child.Process.Kill()
			child.Wait()
		}
	}()
	res, err := Run(context.Background(), "SELECT pid, syscall FROM syscalls LIMIT 3", opt)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 3 || time.Since(start) > 10*time.Second {
		t.Fatalf("rows %d after %v:\n%s", res.Rows, time.Since(start), out.String())
	}
}

// TestTCPStates: a bash client connecting to a listener on loopback shows
// up with its addresses, ports and state names.
func TestTCPStates(t *testing.T) {
	testenv.RequireRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	sql := "SELECT comm, saddr, daddr, dport, old_state, new_state FROM tcp_state WHERE dport = " + itoa(port)
	_, out, _ := during(t, sql, Options{Format: "csv"}, func() {
		script := "exec 3<>/dev/tcp/127.0.0.1/" + itoa(port) + "; cat <&3 >/dev/null"
		if err := exec.Command("bash", "-c", script).Run(); err != nil {
			t.Fatal(err)
		}
	})
	if !strings.Contains(out, "bash,127.0.0.1,127.0.0.1,"+itoa(port)+",CLOSE,SYN_SENT") ||
		!strings.Contains(out, "SYN_SENT,ESTABLISHED") {
		t.Fatalf("no connection states for port %d:\n%s", port, out)
	}
}

// TestSampledSelectivity: while dd makes one-byte reads and writes, the
// optimizer's sample measures how many syscalls pass comm = 'dd' AND
// syscall = 'write' (at most half: dd alternates; other processes only
// lower it) instead of using its defaults (0.05 x 0.05).
func TestSampledSelectivity(t *testing.T) {
	testenv.RequireRoot(t)
	q, err := Compile("SELECT pid FROM syscalls WHERE comm = 'dd' AND syscall = 'write'")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1", "status=none", "count=100000000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(50 * time.Millisecond) // past dd's start-up syscalls
	s, _, err := plan.SampleHooks(q, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sample: %+v", s)
	if !s.Selective() || s.Sel > 0.51 || s.Sel < 0.1 || s.EnterSel < s.Sel {
		t.Fatalf("sample %+v: want measured selectivities, 0.1 <= Sel <= 0.5 <= EnterSel", s)
	}
}
