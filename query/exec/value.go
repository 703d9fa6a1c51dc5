// Package exec is the user-space half of a query plan: it evaluates
// expressions over kernel records, filters, groups, aggregates, windows,
// orders, limits and writes rows as a table, JSON or CSV.
package exec

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/sema"
)

type kind uint8

const (
	kNull kind = iota
	kInt
	kFloat
	kStr
	kBool
	kHist
)

// Value is one evaluated expression.
type Value struct {
	k kind
	i int64
	f float64
	s string
	h *[64]uint64
}

func intV(v int64) Value     { return Value{k: kInt, i: v} }
func floatV(v float64) Value { return Value{k: kFloat, f: v} }
func boolV(b bool) Value     { return Value{k: kBool, i: b2i(b)} }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (v Value) num() float64 {
	if v.k == kFloat {
		return v.f
	}
	return float64(v.i)
}

func (v Value) truth() bool { return v.k == kBool && v.i != 0 }

// Rec is a record in the kernel's slot layout.
type Rec [32]uint64

// env evaluates expressions of one query.
type env struct {
	q *sema.Query
}

func colValue(c *sema.Column, r *Rec) Value {
	if c.Type == sema.TStr {
		return Value{k: kStr, s: c.StrOf(r[:])}
	}
	v := r[c.Slot]
	if c.R == sema.RInt && c.Slot != 1 && c.Slot != 2 {
		return intV(int64(v))
	}
	if c.R == sema.RInt {
		return intV(int64(int32(uint32(v))))
	}
	return intV(int64(v))
}

// eval computes e over r; aggs holds the current group's aggregate results.
func (en *env) eval(e parse.Expr, r *Rec, aggs []Value) Value {
	switch x := e.(type) {
	case *parse.IntLit:
		return intV(x.V)
	case *parse.StrLit:
		return Value{k: kStr, s: x.V}
	case *parse.Col:
		col := en.q.Cols[x]
		if col == nil {
			col = en.q.Table.Col(x.Name)
		}
		return colValue(col, r)
	case *parse.Call:
		return aggs[en.q.AggIndex[x]]
	case *parse.Unary:
		v := en.eval(x.X, r, aggs)
		if v.k == kNull {
			return v
		}
		if x.Op == "NOT" {
			return boolV(!v.truth())
		}
		if v.k == kFloat {
			return floatV(-v.f)
		}
		return intV(-v.i)
	case *parse.Binary:
		l := en.eval(x.L, r, aggs)
		if x.Op == "AND" && !l.truth() {
			return boolV(false)
		}
		if x.Op == "OR" && l.truth() {
			return boolV(true)
		}
		rv := en.eval(x.R, r, aggs)
		if x.Op == "AND" || x.Op == "OR" {
			return boolV(rv.truth())
		}
		if l.k == kNull || rv.k == kNull {
			if x.Op == "=" || x.Op == "!=" || x.Op == "<" || x.Op == "<=" || x.Op == ">" || x.Op == ">=" {
				return boolV(false)
			}
			return Value{}
		}
		return arith(x.Op, l, rv)
	case *parse.In:
		v := en.eval(x.X, r, aggs)
		found := false
		for _, it := range x.List {
			w := en.eval(it, r, aggs)
			if cmp(v, w) == 0 && v.k != kNull {
				found = true
				break
			}
		}
		return boolV(found != x.Not)
	case *parse.Between:
		v, lo, hi := en.eval(x.X, r, aggs), en.eval(x.Lo, r, aggs), en.eval(x.Hi, r, aggs)
		if v.k == kNull {
			return boolV(false)
		}
		in := cmp(v, lo) >= 0 && cmp(v, hi) <= 0
		return boolV(in != x.Not)
	case *parse.Like:
		v := en.eval(x.X, r, aggs)
		p := x.Pattern.V
		var ok bool
		if strings.HasSuffix(p, "%") {
			ok = strings.HasPrefix(v.s, p[:len(p)-1])
		} else {
			ok = v.s == p
		}
		return boolV(ok != x.Not)
	}
	return Value{}
}

func arith(op string, l, r Value) Value {
	switch op {
	case "=", "!=", "<", "<=", ">", ">=":
		c := cmp(l, r)
		switch op {
		case "=":
			return boolV(c == 0)
		case "!=":
			return boolV(c != 0)
		case "<":
			return boolV(c < 0)
		case "<=":
			return boolV(c <= 0)
		case ">":
			return boolV(c > 0)
		}
		return boolV(c >= 0)
	}
	if l.k == kFloat || r.k == kFloat {
		a, b := l.num(), r.num()
		switch op {
		case "+":
			return floatV(a + b)
		case "-":
			return floatV(a - b)
		case "*":
			return floatV(a * b)
		case "/":
			if b == 0 {
				return Value{}
			}
			return floatV(a / b)
		case "%":
			if b == 0 {
				return Value{}
			}
			return floatV(math.Mod(a, b))
		}
	}
	a, b := l.i, r.i
	switch op {
	case "+":
		return intV(a + b)
	case "-":
		return intV(a - b)
	case "*":
		return intV(a * b)
	case "/":
		if b == 0 || (a == math.MinInt64 && b == -1) {
			return Value{} // NULL, as SQL engines without errors do
		}
		return intV(a / b)
	case "%":
		if b == 0 || b == -1 {
			if b == -1 {
				return intV(0)
			}
			return Value{}
		}
		return intV(a % b)
	}
	return Value{}
}

// cmp orders values: NULL first, numbers numerically, strings bytewise.
func cmp(a, b Value) int {
	if a.k == kNull || b.k == kNull {
		return int(b2i(a.k != kNull) - b2i(b.k != kNull))
	}
	if a.k == kStr || b.k == kStr {
		return strings.Compare(a.s, b.s)
	}
	if a.k == kInt && b.k == kInt {
		switch {
		case a.i < b.i:
			return -1
		case a.i > b.i:
			return 1
		}
		return 0
	}
	x, y := a.num(), b.num()
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// appendKey appends an unambiguous encoding of v (for group keys).
func (v Value) appendKey(b []byte) []byte {
	b = append(b, byte(v.k))
	switch v.k {
	case kInt, kBool:
		u := uint64(v.i)
		return append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24), byte(u>>32), byte(u>>40), byte(u>>48), byte(u>>56))
	case kFloat:
		return strconv.AppendFloat(b, v.f, 'g', -1, 64)
	case kStr:
		b = strconv.AppendInt(b, int64(len(v.s)), 10)
		b = append(b, ':')
		return append(b, v.s...)
	}
	return b
}

// text renders v for CSV output (the table format renders through
// writer.cell): a histogram as [lower bound:count …], its non-empty
// buckets.
func (v Value) text() string {
	switch v.k {
	case kNull:
		return "NULL"
	case kInt:
		return strconv.FormatInt(v.i, 10)
	case kFloat:
		return strconv.FormatFloat(v.f, 'f', -1, 64)
	case kStr:
		return v.s
	case kBool:
		return strconv.FormatBool(v.i != 0)
	case kHist:
		var b strings.Builder
		for i, n := range v.h {
			if n == 0 {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s:%d", histLabel(i), n)
		}
		return "[" + b.String() + "]"
	}
	return ""
}

// histLabel is the lower bound of log2 bucket i (bucket 0 holds values <= 0).
func histLabel(i int) string {
	if i == 0 {
		return "0"
	}
	return strconv.FormatUint(uint64(1)<<(i-1), 10)
}

// jsonValue renders v for JSON output.
func (v Value) jsonValue() any {
	switch v.k {
	case kNull:
		return nil
	case kInt:
		return v.i
	case kFloat:
		if math.IsNaN(v.f) || math.IsInf(v.f, 0) {
			return nil
		}
		return v.f
	case kStr:
		return v.s
	case kBool:
		return v.i != 0
	case kHist:
		return histJSON(v.h)
	}
	return nil
}
