package exec

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// writer prints output rows in one of the formats.
type writer struct {
	format  string
	names   []string // JSON keys and CSV header
	tnames  []string // table header: window_end for window_end_ns
	kinds   []colKind
	widths  []int
	w       *bufio.Writer
	csv     *csv.Writer
	started bool
	csvLine []byte // the CSV row being formatted, reused
	rows    int    // rows written

	windowed   bool                  // column 0 is window_end_ns
	blocks     bool                  // table with histograms: a block per row
	wall       func(int64) time.Time // CLOCK_MONOTONIC ns to wall clock
	lastWindow int64                 // the window whose blocks are being written
}

// newWriter writes rows of the columns names; kinds says how the table
// format renders each (nil: all plain); windowed, that column 0 is
// window_end_ns.
func newWriter(out io.Writer, format string, names []string, kinds []colKind, windowed bool) *writer {
	wr := &writer{format: format, names: names, w: bufio.NewWriterSize(out, 64<<10), windowed: windowed}
	if format == "csv" {
		wr.csv = csv.NewWriter(wr.w)
	}
	wr.kinds = make([]colKind, len(names))
	copy(wr.kinds, kinds)
	if windowed {
		wr.kinds[0] = colClock // whatever kinds says
		wr.wall = monoToWall()
	}
	wr.tnames = append([]string(nil), names...)
	for i, k := range wr.kinds {
		switch k {
		case colClock:
			wr.tnames[i] = strings.TrimSuffix(names[i], "_ns")
		case colHist:
			wr.blocks = format == "table"
		}
	}
	for _, n := range wr.tnames {
		w := len(n)
		if w < 10 {
			w = 10
		}
		wr.widths = append(wr.widths, w)
	}
	return wr
}

func (wr *writer) row(vals []Value) error {
	wr.rows++
	switch wr.format {
	case "json":
		var b strings.Builder
		b.WriteByte('{')
		for i, n := range wr.names {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(n)
			v, err := json.Marshal(vals[i].jsonValue())
			if err != nil {
				return err
			}
			b.Write(k)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteString("}\n")
		_, err := wr.w.WriteString(b.String())
		return err
	case "csv":
		if !wr.started {
			wr.started = true
			if err := wr.csv.Write(wr.names); err != nil {
				return err
			}
			wr.csv.Flush() // into wr.w, before the rows
		}
		// formatted in place: a streamed query writes millions of rows
		b := wr.csvLine[:0]
		for i, v := range vals {
			if i > 0 {
				b = append(b, ',')
			}
			b = v.appendCSV(b)
		}
		wr.csvLine = append(b, '\n')
		_, err := wr.w.Write(wr.csvLine)
		return err
	}
	if wr.blocks {
		wr.block(vals)
		return nil
	}
	if !wr.started {
		wr.started = true
		wr.line(wr.tnames)
	}
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = wr.cell(i, v)
	}
	wr.line(s)
	return nil
}

// fit widens table columns to the values of a batch (before the header
// is printed: a stream keeps the widths it started with).
func (wr *writer) fit(rows [][]Value) {
	if wr.format != "table" || wr.started || wr.blocks {
		return
	}
	for _, r := range rows {
		for i, v := range r {
			if n := len(wr.cell(i, v)); i < len(wr.widths) && n > wr.widths[i] && n <= 48 {
				wr.widths[i] = n
			}
		}
	}
}

func (wr *writer) line(cells []string) {
	for i, c := range cells {
		if i == len(cells)-1 {
			fmt.Fprintln(wr.w, c)
		} else {
			fmt.Fprintf(wr.w, "%-*s  ", wr.widths[i], c)
		}
	}
}

func (wr *writer) flush() error {
	if wr.csv != nil {
		wr.csv.Flush()
		if err := wr.csv.Error(); err != nil {
			return err
		}
	}
	return wr.w.Flush()
}

// appendCSV appends v as one CSV field, quoted as encoding/csv would.
func (v Value) appendCSV(b []byte) []byte {
	switch v.k {
	case kInt:
		return strconv.AppendInt(b, v.i, 10)
	case kFloat:
		return strconv.AppendFloat(b, v.f, 'f', -1, 64)
	}
	s := v.text()
	if !csvNeedsQuotes(s) {
		return append(b, s...)
	}
	b = append(b, '"')
	b = append(b, strings.ReplaceAll(s, `"`, `""`)...)
	return append(b, '"')
}

func csvNeedsQuotes(s string) bool {
	if s == "" {
		return false
	}
	if s == `\.` || strings.ContainsAny(s, ",\"\r\n") {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.IsSpace(r)
}
