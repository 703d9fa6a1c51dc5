// Package plan splits a checked query between the kernel and user space.
// It enumerates physical plans from MVSF-only (the kernel reads and emits,
// user space does everything else) to maximal pushdown (filter, projection,
// entry/exit join and partial aggregation in the kernel), estimates their
// cost from sampled event rates, and loads them in cost order through the
// real verifier, keeping the cheapest that loads.
package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cistern-ebpf/cistern/query/kern"
	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/sema"
)

// pushed is a WHERE conjunct the kernel can evaluate.
type pushed struct {
	expr    parse.Expr
	clauses []kern.Clause
	sel     float64 // estimated selectivity
	text    string
}

// analysis is what the logical plan says the kernel could do.
type analysis struct {
	q        *sema.Query
	conj     []parse.Expr
	push     []pushed
	residual []parse.Expr // conjuncts only user space can evaluate
	needed   []int        // slots the user side reads
	aggOK    bool
	aggWhy   string
	aggSlot  int
	aggCol   *sema.Column
	keys     []int
	keyText  []string
	hist     bool
}

func conjuncts(e parse.Expr, out []parse.Expr) []parse.Expr {
	if b, ok := e.(*parse.Binary); ok && b.Op == "AND" {
		return conjuncts(b.R, conjuncts(b.L, out))
	}
	return append(out, e)
}

func analyse(q *sema.Query) *analysis {
	a := &analysis{q: q}
	if q.Where != nil {
		a.conj = conjuncts(q.Where, nil)
	}
	for _, c := range a.conj {
		if p, ok := a.pushable(c); ok {
			a.push = append(a.push, p)
		} else {
			a.residual = append(a.residual, c)
		}
	}
	// the template has Q_MAXCL clause slots: the rest stays in user space
	n := 0
	var keep []pushed
	for _, p := range a.push {
		if n+len(p.clauses) > kern.MaxCl {
			a.residual = append(a.residual, p.expr)
			continue
		}
		n += len(p.clauses)
		keep = append(keep, p)
	}
	a.push = keep
	a.needed = a.slotsUsed()
	a.aggregate()
	return a
}

func (a *analysis) col(e parse.Expr) *sema.Column {
	c, ok := e.(*parse.Col)
	if !ok {
		return nil
	}
	return a.q.Cols[c]
}

func intLit(e parse.Expr) (int64, bool) {
	l, ok := e.(*parse.IntLit)
	if !ok {
		return 0, false
	}
	return l.V, true
}

var flip = map[string]string{"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
var opOf = map[string]kern.Op{"=": kern.OpEQ, "!=": kern.OpNE, "<": kern.OpLT, "<=": kern.OpLE, ">": kern.OpGT, ">=": kern.OpGE}

// value maps a literal compared with col to the slot value, for integer
// and enum columns.
func value(col *sema.Column, e parse.Expr) (uint64, bool) {
	switch col.R {
	case sema.RInt, sema.RUint:
		v, ok := intLit(e)
		return uint64(v), ok
	case sema.REnum:
		s, ok := e.(*parse.StrLit)
		if !ok {
			return 0, false
		}
		return col.EnumValue(s.V)
	}
	return 0, false
}

func (a *analysis) clause(col *sema.Column, op kern.Op, vals ...uint64) kern.Clause {
	// slot 0 (the entry time) is read only after the entry filter passed
	return kern.Clause{Slot: col.Slot, Op: op, Mask: ^uint64(0), Vals: vals, Enter: a.q.Table.Joined && col.Enter && col.Slot != 0}
}

// pushable turns one conjunct into kernel clauses. Comparisons are signed,
// exactly as user space compares (int64), so pushing never changes results.
func (a *analysis) pushable(e parse.Expr) (pushed, bool) {
	text := exprText(a.q.Src, e)
	switch x := e.(type) {
	case *parse.Binary:
		col, other, op := a.col(x.L), x.R, x.Op
		if col == nil {
			col, other, op = a.col(x.R), x.L, flip[x.Op]
		}
		if col == nil {
			return pushed{}, false
		}
		if col.R == sema.RStr {
			s, ok := other.(*parse.StrLit)
			if !ok || op != "=" {
				return pushed{}, false
			}
			return a.strClauses(e, col, s.V, false, text)
		}
		v, ok := value(col, other)
		if !ok {
			return pushed{}, false
		}
		if col.R == sema.REnum && op != "=" && op != "!=" {
			return pushed{}, false
		}
		sel := 0.5
		switch op {
		case "=":
			sel = 0.05
		case "!=":
			sel = 0.95
		}
		return pushed{e, []kern.Clause{a.clause(col, opOf[op], v)}, sel, text}, true
	case *parse.In:
		col := a.col(x.X)
		if col == nil || len(x.List) > kern.MaxV || col.R == sema.RStr || col.R == sema.RAddr {
			return pushed{}, false
		}
		var vals []uint64
		for _, it := range x.List {
			v, ok := value(col, it)
			if !ok {
				return pushed{}, false
			}
			vals = append(vals, v)
		}
		op, sel := kern.OpEQ, 0.05*float64(len(vals))
		if x.Not {
			op, sel = kern.OpNE, 1-sel
		}
		return pushed{e, []kern.Clause{a.clause(col, op, vals...)}, sel, text}, true
	case *parse.Between:
		col := a.col(x.X)
		lo, ok1 := intLit(x.Lo)
		hi, ok2 := intLit(x.Hi)
		if col == nil || x.Not || !ok1 || !ok2 || (col.R != sema.RInt && col.R != sema.RUint) {
			return pushed{}, false
		}
		return pushed{e, []kern.Clause{a.clause(col, kern.OpGE, uint64(lo)), a.clause(col, kern.OpLE, uint64(hi))}, 0.3, text}, true
	case *parse.Like:
		col := a.col(x.X)
		if col == nil || x.Not || col.R != sema.RStr {
			return pushed{}, false
		}
		p := x.Pattern.V
		prefix := strings.HasSuffix(p, "%")
		return a.strClauses(e, col, strings.TrimSuffix(p, "%"), prefix, text)
	}
	return pushed{}, false
}

func (a *analysis) strClauses(e parse.Expr, col *sema.Column, s string, prefix bool, text string) (pushed, bool) {
	vals, masks, ok := col.StrSlots(s, prefix)
	if !ok || len(vals) == 0 {
		return pushed{}, false
	}
	var cl []kern.Clause
	for i := range vals {
		c := a.clause(col, kern.OpEQ, vals[i])
		c.Slot, c.Mask = col.Slot+i, masks[i]
		cl = append(cl, c)
	}
	return pushed{e, cl, 0.05, text}, true
}

func colSlots(c *sema.Column) []int {
	switch c.R {
	case sema.RStr:
		var s []int
		for i := 0; i < c.Width; i++ {
			s = append(s, c.Slot+i)
		}
		return s
	case sema.RAddr:
		return []int{6, c.Slot, c.Slot2, c.Slot2 + 1}
	}
	return []int{c.Slot}
}

// slotsUsed lists the slots user space reads for this query (assuming the
// pushable conjuncts run in the kernel).
func (a *analysis) slotsUsed() []int {
	set := map[int]bool{}
	var walk func(e parse.Expr)
	walk = func(e parse.Expr) {
		switch x := e.(type) {
		case *parse.Col:
			c := a.q.Cols[x]
			if c == nil {
				c = a.q.Table.Col(x.Name)
			}
			for _, s := range colSlots(c) {
				set[s] = true
			}
		case *parse.Unary:
			walk(x.X)
		case *parse.Binary:
			walk(x.L)
			walk(x.R)
		case *parse.Call:
			for _, ar := range x.Args {
				walk(ar)
			}
		case *parse.In:
			walk(x.X)
		case *parse.Between:
			walk(x.X)
			walk(x.Lo)
			walk(x.Hi)
		case *parse.Like:
			walk(x.X)
		}
	}
	for _, r := range a.residual {
		walk(r)
	}
	for _, it := range a.q.Items {
		walk(it.Expr)
	}
	for _, g := range a.q.GroupBy {
		walk(g)
	}
	if a.q.Having != nil {
		walk(a.q.Having)
	}
	for _, o := range a.q.Order {
		walk(o.Expr)
	}
	var out []int
	for s := range set {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

// aggregate decides whether the aggregation can run as per-CPU partials.
func (a *analysis) aggregate() {
	q := a.q
	if !q.Grouped {
		a.aggWhy = "no aggregation"
		return
	}
	if len(a.residual) > 0 {
		a.aggWhy = "part of WHERE runs only in user space: " + exprText(q.Src, a.residual[0])
		return
	}
	var argCol *sema.Column
	for _, c := range q.Aggs {
		switch {
		case c.Distinct:
			a.aggWhy = "COUNT(DISTINCT) needs every value"
			return
		case c.Name == "QUANTILE":
			a.aggWhy = "QUANTILE needs every value"
			return
		case c.Star || c.Name == "COUNT":
			continue
		}
		col := a.col(c.Args[0])
		if col == nil || col.Type != sema.TInt {
			a.aggWhy = c.Name + " of an expression (only plain columns are aggregated in the kernel)"
			return
		}
		if argCol != nil && argCol != col {
			a.aggWhy = "aggregates over different columns (the kernel keeps one per key)"
			return
		}
		argCol = col
		if c.Name == "HIST" {
			a.hist = true
		}
	}
	nslots := 0
	for _, g := range q.GroupBy {
		col := a.col(g)
		if col == nil || col.R == sema.RAddr {
			a.aggWhy = "GROUP BY " + exprText(q.Src, g) + " is not a plain column the kernel can key on"
			return
		}
		for _, s := range colSlots(col) {
			a.keys = append(a.keys, s)
			nslots++
		}
		a.keyText = append(a.keyText, col.Name)
	}
	if nslots > kern.MaxKey {
		a.keys = nil
		a.aggWhy = fmt.Sprintf("GROUP BY keys span %d slots (the kernel key holds %d)", nslots, kern.MaxKey)
		return
	}
	a.aggOK, a.aggCol = true, argCol
	if argCol != nil {
		a.aggSlot = argCol.Slot
	}
}

func exprText(src string, e parse.Expr) string {
	s, en := e.Span()
	if int(en) <= len(src) && s < en {
		return strings.TrimSpace(src[s:en])
	}
	return sema.Key(e)
}

// and rebuilds a conjunction.
func and(es []parse.Expr) parse.Expr {
	if len(es) == 0 {
		return nil
	}
	e := es[0]
	for _, r := range es[1:] {
		e = &parse.Binary{Op: "AND", L: e, R: r}
	}
	return e
}
