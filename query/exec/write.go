package exec

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// writer prints output rows in one of the formats.
type writer struct {
	format  string
	names   []string
	widths  []int
	w       *bufio.Writer
	csv     *csv.Writer
	started bool
}

func newWriter(out io.Writer, format string, names []string) *writer {
	wr := &writer{format: format, names: names, w: bufio.NewWriterSize(out, 64<<10)}
	if format == "csv" {
		wr.csv = csv.NewWriter(wr.w)
	}
	for _, n := range names {
		w := len(n)
		if w < 10 {
			w = 10
		}
		wr.widths = append(wr.widths, w)
	}
	return wr
}

func (wr *writer) row(vals []Value) error {
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
		}
		rec := make([]string, len(vals))
		for i, v := range vals {
			rec[i] = v.text()
		}
		return wr.csv.Write(rec)
	}
	if !wr.started {
		wr.started = true
		wr.line(wr.names)
	}
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = v.text()
	}
	wr.line(s)
	return nil
}

// fit widens table columns to the values of a batch (before the header
// is printed: a stream keeps the widths it started with).
func (wr *writer) fit(rows [][]Value) {
	if wr.format != "table" || wr.started {
		return
	}
	for _, r := range rows {
		for i, v := range r {
			if n := len(v.text()); i < len(wr.widths) && n > wr.widths[i] && n <= 48 {
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
