package benchkit

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WriteTable prints the report for people: a header with the bench, kernel
// and config, one row per mode and one column per metric (the union over
// modes, in first-seen order; "-" where a mode lacks a metric), then the
// ratios, the targets with PASS or FAIL, and the notes.
func (r *Report) WriteTable(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()

	run := "full run"
	if r.quick {
		run = "quick run"
	}
	fmt.Fprintf(w, "bench %s (kernel %s, %s)\n", r.bench, r.kernel, run)
	if len(r.config.keys) > 0 {
		parts := make([]string, len(r.config.keys))
		for i, k := range r.config.keys {
			parts[i] = k + "=" + FormatValue(r.config.vals[k])
		}
		fmt.Fprintf(w, "config: %s\n", strings.Join(parts, "  "))
	}

	fmt.Fprintln(w)
	switch {
	case len(r.modes) == 0:
		fmt.Fprintln(w, "(no results)")
	case len(r.sections) > 0:
		for i, sec := range r.sections {
			if rows := r.sectionRows(sec); len(rows) > 1 {
				if i > 0 {
					fmt.Fprintln(w)
				}
				fmt.Fprintln(w, sec.title)
				writeAligned(w, rows)
			}
		}
	default:
		cols := r.tableColumns()
		rows := [][]string{append([]string{"mode"}, cols...)}
		for _, m := range r.modes {
			row := []string{m.name}
			for _, c := range cols {
				if v, ok := m.metrics.get(c); ok {
					row = append(row, formatCell(&m.metrics, c, v))
				} else {
					row = append(row, "-")
				}
			}
			rows = append(rows, row)
		}
		writeAligned(w, rows)
	}

	if len(r.ratios.keys) > 0 {
		fmt.Fprintln(w)
		rows := [][]string{{"ratio", "value"}}
		for _, k := range r.ratios.keys {
			if isSpreadKey(&r.ratios, k) {
				continue
			}
			rows = append(rows, []string{k, formatCell(&r.ratios, k, r.ratios.vals[k])})
		}
		writeAligned(w, rows)
	}

	if len(r.targets) > 0 {
		fmt.Fprintln(w)
		rows := [][]string{{"target", "got", "op", "want", "result"}}
		for _, t := range r.targets {
			res := "PASS"
			if !t.Pass {
				res = "FAIL"
			}
			got := FormatValue(t.Got)
			if t.Min != nil && t.Max != nil {
				got = FormatSpread(t.Got, *t.Min, *t.Max)
			}
			rows = append(rows, []string{t.Name, got, t.Op, FormatValue(t.Want), res})
		}
		writeAligned(w, rows)
	}

	if len(r.notes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "notes:")
		for _, n := range r.notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
}

// tableColumns are the metric columns of the table: the Headline ones that
// some mode has, else every metric but the _min and _max beside a median.
func (r *Report) tableColumns() []string {
	var cols []string
	for _, m := range r.modes {
		for _, k := range m.metrics.keys {
			if slices.Contains(cols, k) || isSpreadKey(&m.metrics, k) {
				continue
			}
			if r.headline != nil && !slices.Contains(r.headline, k) {
				continue
			}
			cols = append(cols, k)
		}
	}
	if r.headline != nil { // in the order the bench named them
		slices.SortStableFunc(cols, func(a, b string) int {
			return slices.Index(r.headline, a) - slices.Index(r.headline, b)
		})
	}
	return cols
}

// sectionRows are a section's cells, header first; columns no row has are
// dropped.
func (r *Report) sectionRows(sec section) [][]string {
	var ms []*modeResult
	for _, name := range sec.rows {
		for _, m := range r.modes {
			if m.name == name {
				ms = append(ms, m)
			}
		}
	}
	var cols []string
	for _, c := range sec.cols {
		for _, m := range ms {
			if _, ok := m.metrics.get(c); ok {
				cols = append(cols, c)
				break
			}
		}
	}
	if len(cols) == 0 {
		return nil
	}
	out := [][]string{append([]string{"mode"}, cols...)}
	for _, m := range ms {
		row := []string{m.name}
		for _, c := range cols {
			if v, ok := m.metrics.get(c); ok {
				row = append(row, formatCell(&m.metrics, c, v))
			} else {
				row = append(row, "-")
			}
		}
		out = append(out, row)
	}
	return out
}

// isSpreadKey reports whether k is the _min or _max of another key of m.
func isSpreadKey(m *orderedMap, k string) bool {
	for _, suf := range []string{"_min", "_max"} {
		if base, ok := strings.CutSuffix(k, suf); ok {
			if _, has := m.get(base); has {
				return true
			}
		}
	}
	return false
}

// formatCell renders v, as "median [min–max]" when m holds k_min and k_max.
func formatCell(m *orderedMap, k string, v any) string {
	med, ok := v.(float64)
	lo, okLo := m.get(k + "_min")
	hi, okHi := m.get(k + "_max")
	if ok && okLo && okHi {
		l, ok1 := lo.(float64)
		h, ok2 := hi.(float64)
		if ok1 && ok2 {
			return FormatSpread(med, l, h)
		}
	}
	return FormatValue(v)
}

// writeAligned prints rows with the first column left-aligned and the others
// right-aligned, so that digits line up; the first row is the header.
func writeAligned(w io.Writer, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i == 0 {
				b.WriteString(cell + pad)
			} else {
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// FormatValue renders a metric value for the table: integers in full without
// an exponent, floats with a precision suited to their size (see
// FormatFloat), bools as true/false, maps as "k=v k=v" with sorted keys, and
// nil as "-".
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return FormatFloat(x)
	case float32:
		return FormatFloat(float64(x))
	case fmt.Stringer: // e.g. time.Duration, before its integer kind is seen
		return x.String()
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return FormatFloat(rv.Float())
	case reflect.Bool:
		return strconv.FormatBool(rv.Bool())
	case reflect.String:
		return rv.String()
	case reflect.Map:
		type kv struct{ k, v string }
		var kvs []kv
		iter := rv.MapRange()
		for iter.Next() {
			kvs = append(kvs, kv{mapKeyString(iter.Key()), FormatValue(iter.Value().Interface())})
		}
		slices.SortFunc(kvs, func(a, b kv) int { return strings.Compare(a.k, b.k) })
		parts := make([]string, len(kvs))
		for i, e := range kvs {
			parts[i] = e.k + "=" + e.v
		}
		return strings.Join(parts, " ")
	case reflect.Slice, reflect.Array:
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = FormatValue(rv.Index(i).Interface())
		}
		return "[" + strings.Join(parts, " ") + "]"
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return "-"
		}
		return FormatValue(rv.Elem().Interface())
	}
	return fmt.Sprint(v)
}

// FormatFloat renders a float for people without ever using an exponent for
// large values: whole numbers and values of 1000 or more print with no
// decimals (1234567), values from 1 up with three decimals (3.571), smaller
// ones with three significant digits (0.990, 0.00123). NaN and ±Inf print
// as "n/a".
func FormatFloat(f float64) string {
	a := math.Abs(f)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "n/a"
	case f == 0:
		return "0" // not "-0"
	case f == math.Trunc(f) || a >= 1000:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(f, 'f', 3, 64)
	}
	decimals := 2 - int(math.Floor(math.Log10(a)))
	if decimals > 12 {
		return strconv.FormatFloat(f, 'g', 3, 64) // vanishingly small: an exponent is clearer
	}
	return strconv.FormatFloat(f, 'f', decimals, 64)
}
