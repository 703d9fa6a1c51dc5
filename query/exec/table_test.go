package exec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// fixedClock makes window ends print as 12:00:00 plus their value.
func fixedClock(ns int64) time.Time {
	return time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC).Add(time.Duration(ns))
}

// histRows feeds two groups: bash with latencies in buckets (..., 0], [1],
// [64, 128) x4, [256, 512) and [1K, 2K) x2 (empty buckets between them),
// sh with one latency in [4K, 8K).
func histRows(e *Engine) {
	for _, lat := range []uint64{0, 1, 100, 100, 100, 100, 300, 1500, 1500} {
		e.Row(sysRec(7, 0, lat, "bash"))
	}
	e.Row(sysRec(8, 0, 5000, "sh"))
}

// TestHistTableBars: the table format prints a block per group, a line
// naming the group and the other columns, then bpftrace's hist() bars:
// every bucket from the first non-empty to the last, the largest filling
// 52 columns.
func TestHistTableBars(t *testing.T) {
	q := compile(t, "SELECT comm, COUNT(*) AS n, QUANTILE(latency_ns, 0.5) AS p50, HIST(latency_ns) AS lat FROM syscalls GROUP BY comm ORDER BY comm")
	var out bytes.Buffer
	e := New(q, nil, &out, "table")
	histRows(e)
	if err := e.Finish(0); err != nil {
		t.Fatal(err)
	}
	want := `comm=bash  n=9  p50=100ns
lat:
(..., 0]               1 |@@@@@@@@@@@@@                                       |
[1]                    1 |@@@@@@@@@@@@@                                       |
[2, 4)                 0 |                                                    |
[4, 8)                 0 |                                                    |
[8, 16)                0 |                                                    |
[16, 32)               0 |                                                    |
[32, 64)               0 |                                                    |
[64, 128)              4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[128, 256)             0 |                                                    |
[256, 512)             1 |@@@@@@@@@@@@@                                       |
[512, 1K)              0 |                                                    |
[1K, 2K)               2 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |

comm=sh  n=1  p50=5.00us
lat:
[4K, 8K)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	if e.Rows() != 2 {
		t.Errorf("Rows() = %d, want 2 (one per group, not per line)", e.Rows())
	}
}

// TestHistLargeCounts: counts wider than bpftrace's 8 columns widen the
// count column instead of pushing the bars out of line; ranges take K, M,
// G, T, P and E suffixes.
func TestHistLargeCounts(t *testing.T) {
	var h [64]uint64
	h[20] = 1_000_000_000 // [512K, 1M)
	h[21] = 5_000_000_000 // [1M, 2M)
	h[23] = 7             // [4M, 8M), after an empty [2M, 4M)
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	writeHist(w, &h)
	w.Flush()
	want := `[512K, 1M)      1000000000 |@@@@@@@@@@                                          |
[1M, 2M)        5000000000 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[2M, 4M)                 0 |                                                    |
[4M, 8M)                 7 |                                                    |
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	for i, want := range map[int]string{0: "(..., 0]", 1: "[1]", 2: "[2, 4)", 10: "[512, 1K)", 11: "[1K, 2K)",
		31: "[1G, 2G)", 41: "[1T, 2T)", 51: "[1P, 2P)", 61: "[1E, 2E)", 63: "[4E, 8E)"} {
		if got := histRange(i); got != want {
			t.Errorf("histRange(%d) = %q, want %q", i, got, want)
		}
	}
}

// TestHistEmptyAndSeveral: several histograms of one group each get their
// name and bars; a histogram that saw no value says so; the block's header
// quotes values that are not one word.
func TestHistEmptyAndSeveral(t *testing.T) {
	q := compile(t, "SELECT comm, HIST(latency_ns) AS lat, HIST(ret), HIST(latency_ns / (pid - 7)) AS none FROM syscalls GROUP BY comm")
	var out bytes.Buffer
	e := New(q, nil, &out, "table")
	r := sysRec(7, 0, 3, "my app") // pid 7: latency_ns / 0 is NULL, not counted
	r[13] = ^uint64(0)             // ret -1: the bucket of values <= 0
	e.Row(r)
	r = sysRec(7, 0, 2, "my app")
	r[13] = 2
	e.Row(r)
	if err := e.Finish(0); err != nil {
		t.Fatal(err)
	}
	want := `comm="my app"
lat:
[2, 4)                 2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
HIST(ret):
(..., 0]               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[1]                    0 |                                                    |
[2, 4)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
none:
(no values)

`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}

	// no rows at all, no GROUP BY: one block, an empty histogram
	out.Reset()
	e = New(compile(t, "SELECT HIST(latency_ns) FROM syscalls"), nil, &out, "table")
	if err := e.Finish(0); err != nil {
		t.Fatal(err)
	}
	if want := "HIST(latency_ns):\n(no values)\n\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

// TestHistWindowed: with WINDOW, each window's blocks are headed by the
// wall-clock time the window ended.
func TestHistWindowed(t *testing.T) {
	q := compile(t, "SELECT comm, HIST(latency_ns) AS lat FROM syscalls GROUP BY comm WINDOW 1s")
	var out bytes.Buffer
	e := New(q, nil, &out, "table")
	e.w.wall = fixedClock
	e.Row(sysRec(7, 0, 100, "bash"))
	e.Row(sysRec(8, 0, 100, "sh"))
	if err := e.Window(int64(1500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	e.Row(sysRec(7, 0, 1000, "bash"))
	if err := e.Window(int64(2500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	want := `window ending 12:00:01.500
comm=bash
lat:
[64, 128)              1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

comm=sh
lat:
[64, 128)              1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

window ending 12:00:02.500
comm=bash
lat:
[512, 1K)              1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// TestHistJSONAndCSV: JSON keeps the buckets as numbers, as bpftrace -f
// json does (min and max inclusive, the bucket of values <= 0 without a
// min, empty buckets between the first and last included); CSV keeps the
// compact [lower bound:count …] of the non-empty buckets.
func TestHistJSONAndCSV(t *testing.T) {
	q := compile(t, "SELECT comm, HIST(latency_ns) AS lat FROM syscalls GROUP BY comm ORDER BY comm")
	var out bytes.Buffer
	e := New(q, nil, &out, "json")
	histRows(e)
	if err := e.Finish(0); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %q", out.String())
	}
	var row struct {
		Comm string
		Lat  []map[string]json.Number
	}
	d := json.NewDecoder(strings.NewReader(lines[0]))
	d.UseNumber()
	if err := d.Decode(&row); err != nil {
		t.Fatal(err)
	}
	if row.Comm != "bash" || len(row.Lat) != 12 {
		t.Fatalf("got %s", lines[0])
	}
	for i, b := range row.Lat {
		for k, v := range b {
			if _, err := v.Int64(); err != nil || (k != "min" && k != "max" && k != "count") {
				t.Fatalf("bucket %d: %s = %v: want integer min, max, count", i, k, v)
			}
		}
	}
	want := `{"comm":"bash","lat":[{"max":0,"count":1},{"min":1,"max":1,"count":1},{"min":2,"max":3,"count":0},` +
		`{"min":4,"max":7,"count":0},{"min":8,"max":15,"count":0},{"min":16,"max":31,"count":0},{"min":32,"max":63,"count":0},` +
		`{"min":64,"max":127,"count":4},{"min":128,"max":255,"count":0},{"min":256,"max":511,"count":1},` +
		`{"min":512,"max":1023,"count":0},{"min":1024,"max":2047,"count":2}]}`
	if lines[0] != want {
		t.Fatalf("got  %s\nwant %s", lines[0], want)
	}
	if want := `{"comm":"sh","lat":[{"min":4096,"max":8191,"count":1}]}`; lines[1] != want {
		t.Fatalf("got  %s\nwant %s", lines[1], want)
	}

	out.Reset()
	e = New(q, nil, &out, "csv")
	histRows(e)
	if err := e.Finish(0); err != nil {
		t.Fatal(err)
	}
	if want := "comm,lat\nbash,[0:1 1:1 64:4 256:1 1024:2]\nsh,[4096:1]\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

// TestTableUnitsAndWindows: in the table format, aggregates of a duration
// carry a unit, averages are rounded, window ends are times of day; JSON
// and CSV keep exact numbers.
func TestTableUnitsAndWindows(t *testing.T) {
	q := compile(t, "SELECT syscall, COUNT(*) AS n, QUANTILE(latency_ns, 0.99) AS p99, AVG(latency_ns) AS avg, MAX(latency_ns), SUM(latency_ns) AS total, AVG(pid) AS apid FROM syscalls GROUP BY syscall WINDOW 1s")
	rows := func(e *Engine) {
		for _, lat := range []uint64{500, 1500, 2_000_000} {
			e.Row(sysRec(uint64(lat%7), 0, lat, "a"))
		}
		e.Row(sysRec(1, 1, 3_000_000_000, "a"))
	}
	var out bytes.Buffer
	e := New(q, nil, &out, "table")
	e.w.wall = fixedClock
	rows(e)
	if err := e.Window(int64(time.Second)); err != nil {
		t.Fatal(err)
	}
	want := `window_end    syscall     n           p99         avg         MAX(latency_ns)  total       apid
12:00:01.000  read        3           2.00ms      667.33us    2.00ms           2.00ms      2.33
12:00:01.000  write       1           3.00s       3.00s       3.00s            3.00s       1
`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	e = New(q, nil, &out, "csv")
	rows(e)
	if err := e.Window(123); err != nil {
		t.Fatal(err)
	}
	want = "window_end_ns,syscall,n,p99,avg,MAX(latency_ns),total,apid\n123,read,3,2000000,667333.3333333334,2000000,2002000,2.3333333333333335\n123,write,1,3000000000,3000000000,3000000000,3000000000,1\n"
	if out.String() != want {
		t.Fatalf("got %q\nwant %q", out.String(), want)
	}
	for ns, want := range map[float64]string{0: "0ns", 999: "999ns", 999.6: "1.00us", 1500: "1.50us", 999_994: "999.99us",
		999_996: "1.00ms", 50_171_576: "50.17ms", 3e9: "3.00s", 7.2e12: "7200.00s", -1500: "-1.50us"} {
		if got := fmtDuration(ns); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", ns, got, want)
		}
	}
}
