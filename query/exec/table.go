package exec

import (
	"bufio"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/sema"
)

// How the table format renders a column (JSON and CSV keep raw numbers).
type colKind uint8

const (
	colPlain colKind = iota
	colClock         // window_end_ns: wall-clock time of day
	colDur           // an aggregate of a duration column: ns, us, ms or s
	colHist          // a histogram: bars, one block per row
)

// Histogram bars as bpftrace's hist() prints them: the range left in 16
// columns, the count right-aligned in 8 (more when a count needs it), the
// bar scaled so that the largest bucket fills 52 columns.
const (
	histLabelWidth = 16
	histCountWidth = 8
	histBarWidth   = 52
)

// clockLayout renders window ends in the table format.
const clockLayout = "15:04:05.000"

// durationAggs are the aggregates whose result keeps their argument's unit.
var durationAggs = map[string]bool{"MIN": true, "MAX": true, "SUM": true, "AVG": true, "QUANTILE": true}

// isDuration reports whether a column holds a duration in ns (not a
// CLOCK_MONOTONIC time such as enter_ns).
func isDuration(c *sema.Column) bool { return c != nil && c.Name == "latency_ns" }

// itemKind is how the table format renders item it of q.
func itemKind(q *sema.Query, it sema.Item) colKind {
	if it.Type == sema.THist {
		return colHist
	}
	if c, ok := it.Expr.(*parse.Call); ok && durationAggs[c.Name] && !c.Distinct && !c.Star && len(c.Args) > 0 {
		if col, ok := c.Args[0].(*parse.Col); ok && isDuration(q.Cols[col]) {
			return colDur
		}
	}
	return colPlain
}

// monoToWall converts CLOCK_MONOTONIC ns (the clock of window ends) to
// wall-clock time, with the offset between the clocks taken now.
func monoToWall() func(int64) time.Time {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	off := time.Now().UnixNano() - ts.Nano()
	return func(ns int64) time.Time { return time.Unix(0, ns+off) }
}

// cell renders value v of column i for the table format.
func (wr *writer) cell(i int, v Value) string {
	if v.k == kNull {
		return "NULL"
	}
	switch wr.kinds[i] {
	case colClock:
		if v.k == kInt {
			return wr.wall(v.i).Format(clockLayout)
		}
	case colDur:
		if v.k == kInt || v.k == kFloat {
			return fmtDuration(v.num())
		}
	}
	if v.k == kFloat {
		return fmtFloat(v.f)
	}
	return v.text()
}

// fmtDuration renders ns with a unit: 812ns, 1.50us, 50.17ms, 2.00s.
func fmtDuration(ns float64) string {
	sign := ""
	if ns < 0 {
		sign, ns = "-", -ns
	}
	switch {
	case math.IsNaN(ns) || math.IsInf(ns, 0):
		return "NULL"
	case ns < 999.5:
		return sign + strconv.FormatFloat(ns, 'f', 0, 64) + "ns"
	case ns < 999_995:
		return sign + strconv.FormatFloat(ns/1e3, 'f', 2, 64) + "us"
	case ns < 999_995_000:
		return sign + strconv.FormatFloat(ns/1e6, 'f', 2, 64) + "ms"
	}
	return sign + strconv.FormatFloat(ns/1e9, 'f', 2, 64) + "s"
}

// fmtFloat renders a float for people: whole numbers as integers, others
// with two decimals (three significant digits below 1).
func fmtFloat(f float64) string {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "NULL"
	case f == math.Trunc(f) && math.Abs(f) < 1e15:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case math.Abs(f) < 1:
		return strconv.FormatFloat(f, 'g', 3, 64)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// block writes one row of a table that has histograms: a line naming the
// row's other columns (name=value), then each histogram under its name,
// then a blank line. With WINDOW, each window's blocks are headed by the
// time the window ended.
func (wr *writer) block(vals []Value) {
	first := 0
	if wr.windowed {
		first = 1
		if end := vals[0].i; !wr.started || end != wr.lastWindow {
			fmt.Fprintf(wr.w, "window ending %s\n", wr.cell(0, vals[0]))
			wr.lastWindow = end
		}
	}
	wr.started = true
	var head []string
	for i := first; i < len(vals); i++ {
		if wr.kinds[i] != colHist {
			head = append(head, wr.tnames[i]+"="+quoteCell(wr.cell(i, vals[i])))
		}
	}
	if len(head) > 0 {
		fmt.Fprintln(wr.w, strings.Join(head, "  "))
	}
	for i := first; i < len(vals); i++ {
		if wr.kinds[i] == colHist {
			fmt.Fprintf(wr.w, "%s:\n", wr.tnames[i])
			writeHist(wr.w, vals[i].h)
		}
	}
	wr.w.WriteByte('\n')
}

// quoteCell quotes a value that would not read as one word.
func quoteCell(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		return strconv.Quote(s)
	}
	return s
}

// writeHist writes the buckets from the first non-empty one to the last,
// empty ones between them included, as bars.
func writeHist(w *bufio.Writer, h *[64]uint64) {
	lo, hi := -1, -1
	var max uint64
	if h != nil {
		for i, n := range h {
			if n > 0 {
				if lo < 0 {
					lo = i
				}
				hi = i
				if n > max {
					max = n
				}
			}
		}
	}
	if lo < 0 {
		w.WriteString("(no values)\n")
		return
	}
	cw := histCountWidth
	if d := len(strconv.FormatUint(max, 10)); d > cw {
		cw = d
	}
	for i := lo; i <= hi; i++ {
		n := h[i]
		bar := int(float64(n) / float64(max) * histBarWidth)
		if bar > histBarWidth {
			bar = histBarWidth
		}
		fmt.Fprintf(w, "%-*s%*d |%s%s|\n", histLabelWidth, histRange(i), cw, n,
			strings.Repeat("@", bar), strings.Repeat(" ", histBarWidth-bar))
	}
}

// histRange names log2 bucket i as bpftrace does: (..., 0] for values <= 0
// (bucket 0), [1], then [2, 4), [4, 8), …, [512, 1K), [1K, 2K), …
func histRange(i int) string {
	switch i {
	case 0:
		return "(..., 0]"
	case 1:
		return "[1]"
	}
	return "[" + pow2Label(i-1) + ", " + pow2Label(i) + ")"
}

// pow2Label writes 2^p with a binary suffix: 512, 1K, 2M, 8E.
func pow2Label(p int) string {
	const suffixes = " KMGTPE"
	s := strconv.FormatUint(uint64(1)<<(p%10), 10)
	if p >= 10 {
		s += string(suffixes[p/10])
	}
	return s
}

// histBucket is one bucket in JSON, as bpftrace -f json writes hist():
// min and max inclusive; the bucket of values <= 0 has no min.
type histBucket struct {
	Min   *int64 `json:"min,omitempty"`
	Max   int64  `json:"max"`
	Count uint64 `json:"count"`
}

// histJSON lists the buckets from the first non-empty one to the last.
func histJSON(h *[64]uint64) []histBucket {
	out := []histBucket{}
	if h == nil {
		return out
	}
	lo, hi := -1, -1
	for i, n := range h {
		if n > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	for i := lo; i <= hi && lo >= 0; i++ {
		b := histBucket{Count: h[i]}
		if i > 0 {
			mn := int64(1) << (i - 1)
			b.Min = &mn
			b.Max = int64(uint64(1)<<i - 1)
		}
		out = append(out, b)
	}
	return out
}
