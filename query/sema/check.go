package sema

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cistern-ebpf/cistern/query/parse"
)

// TBool is the type of predicates.
const TBool Type = 100

// Item is one output column.
type Item struct {
	Name string // alias, or the SQL text
	Expr parse.Expr
	Type Type
}

// Query is a checked query: every column resolved, every expression typed.
type Query struct {
	*parse.Query
	Table          *Table
	Binary, Symbol string
	Items          []Item
	Aggs           []*parse.Call
	AggIndex       map[*parse.Call]int
	Grouped        bool
	Types          map[parse.Expr]Type
	Cols           map[*parse.Col]*Column
	Order          []parse.OrderItem // aliases resolved to their expressions
}

type checker struct {
	q   *Query
	src string
}

func (c *checker) errf(e parse.Expr, format string, a ...any) error {
	p, _ := e.Span()
	return parse.Errorf(c.src, p, format, a...)
}

// Check resolves and types q.
func Check(pq *parse.Query) (*Query, error) {
	q := &Query{Query: pq, AggIndex: map[*parse.Call]int{}, Types: map[parse.Expr]Type{}, Cols: map[*parse.Col]*Column{}}
	c := &checker{q: q, src: pq.Src}
	if err := c.source(); err != nil {
		return nil, err
	}
	if pq.Star > 0 {
		if len(pq.GroupBy) > 0 {
			return nil, parse.Errorf(c.src, pq.Star-1, "SELECT * cannot be grouped: name the columns")
		}
		for _, col := range q.Table.Cols {
			e := &parse.Col{Name: col.Name}
			pq.Items = append(pq.Items, parse.SelectItem{Expr: e, Text: col.Name})
		}
	}
	if pq.Where != nil {
		t, err := c.expr(pq.Where, false)
		if err != nil {
			return nil, err
		}
		if t != TBool {
			return nil, c.errf(pq.Where, "WHERE needs a condition, found a %s", t)
		}
	}
	for _, g := range pq.GroupBy {
		t, err := c.expr(g, false)
		if err != nil {
			return nil, err
		}
		if t == TBool {
			return nil, c.errf(g, "GROUP BY a condition is not supported: group by columns or arithmetic")
		}
	}
	seen := map[string]bool{}
	for _, it := range pq.Items {
		t, err := c.expr(it.Expr, true)
		if err != nil {
			return nil, err
		}
		name := it.Alias
		if name == "" {
			name = it.Text
		}
		if seen[name] {
			return nil, c.errf(it.Expr, "two output columns are named %q: give one an alias with AS", name)
		}
		seen[name] = true
		q.Items = append(q.Items, Item{Name: name, Expr: it.Expr, Type: t})
	}
	q.Grouped = len(q.Aggs) > 0 || len(pq.GroupBy) > 0
	if pq.Having != nil {
		if !q.Grouped {
			return nil, c.errf(pq.Having, "HAVING needs aggregates or GROUP BY (use WHERE)")
		}
		t, err := c.expr(pq.Having, true)
		if err != nil {
			return nil, err
		}
		if t != TBool {
			return nil, c.errf(pq.Having, "HAVING needs a condition, found a %s", t)
		}
	}
	if pq.Window > 0 && !q.Grouped {
		return nil, parse.Errorf(c.src, pq.WindowPos, "WINDOW needs aggregates or GROUP BY: a window closes groups")
	}
	for _, o := range pq.OrderBy {
		e := o.Expr
		if col, ok := e.(*parse.Col); ok {
			for _, it := range q.Items {
				if it.Name == col.Name {
					e = it.Expr
				}
			}
		}
		if e == o.Expr {
			t, err := c.expr(e, true)
			if err != nil {
				return nil, err
			}
			if t == THist {
				return nil, c.errf(o.Expr, "cannot ORDER BY a histogram")
			}
		} else if q.Types[e] == THist {
			return nil, c.errf(o.Expr, "cannot ORDER BY a histogram")
		}
		q.Order = append(q.Order, parse.OrderItem{Expr: e, Desc: o.Desc})
	}
	if q.Grouped {
		keys := map[string]bool{}
		for _, g := range pq.GroupBy {
			keys[Key(g)] = true
		}
		for _, it := range q.Items {
			if err := c.grouped(it.Expr, keys); err != nil {
				return nil, err
			}
		}
		if pq.Having != nil {
			if err := c.grouped(pq.Having, keys); err != nil {
				return nil, err
			}
		}
		for _, o := range q.Order {
			if err := c.grouped(o.Expr, keys); err != nil {
				return nil, err
			}
		}
	}
	return q, nil
}

func (c *checker) source() error {
	f := c.q.From
	t, ok := Tables[f.Name]
	if !ok {
		return parse.Errorf(c.src, f.Pos, "unknown table %s (tables: %s)", f.Name, strings.Join(TableNames(), ", "))
	}
	c.q.Table = t
	if t.Name != "uprobe" {
		if len(f.Args) > 0 {
			return parse.Errorf(c.src, f.Args[0].P, "table %s takes no arguments", f.Name)
		}
		return nil
	}
	if len(f.Args) != 2 {
		return parse.Errorf(c.src, f.Pos, "uprobe takes two arguments: uprobe('<binary or library>', '<symbol>')")
	}
	bin, err := resolveBinary(f.Args[0].V)
	if err != nil {
		return parse.Errorf(c.src, f.Args[0].P, "%v", err)
	}
	if err := hasSymbol(bin, f.Args[1].V); err != nil {
		return parse.Errorf(c.src, f.Args[1].P, "%v", err)
	}
	c.q.Binary, c.q.Symbol = bin, f.Args[1].V
	return nil
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib", "/lib"}

// resolveBinary finds a path, a program on $PATH, or a library by name
// ("libc" finds libc.so.6).
func resolveBinary(name string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("no such binary %s", name)
		}
		return name, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range libDirs {
		for _, pat := range []string{name + ".so.*", name, name + ".so"} {
			m, _ := filepath.Glob(filepath.Join(d, pat))
			sort.Strings(m)
			for _, f := range m {
				if isELF(f) { // libc.so is a linker script
					return f, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no binary or library %q on $PATH or in %s", name, strings.Join(libDirs[:2], ", "))
}

func isELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func hasSymbol(bin, sym string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("%s is not an ELF file: %v", bin, err)
	}
	defer f.Close()
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, _ := get()
		for _, s := range syms {
			if s.Name == sym && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("%s has no function symbol %q", bin, sym)
}

func isAgg(e parse.Expr) bool { _, ok := e.(*parse.Call); return ok }

func numeric(t Type) bool { return t == TInt || t == TFloat }

// expr types e; aggOK says whether aggregates may appear.
func (c *checker) expr(e parse.Expr, aggOK bool) (Type, error) {
	t, err := c.expr1(e, aggOK)
	if err == nil {
		c.q.Types[e] = t
	}
	return t, err
}

func (c *checker) expr1(e parse.Expr, aggOK bool) (Type, error) {
	switch x := e.(type) {
	case *parse.IntLit:
		return TInt, nil
	case *parse.StrLit:
		return TStr, nil
	case *parse.FloatLit:
		return 0, c.errf(e, "decimal numbers are only allowed as QUANTILE's fraction")
	case *parse.Col:
		col := c.q.Table.Col(x.Name)
		if col == nil {
			var names []string
			for _, cc := range c.q.Table.Cols {
				names = append(names, cc.Name)
			}
			return 0, c.errf(e, "unknown column %s in %s (columns: %s)", x.Name, c.q.Table.Name, strings.Join(names, ", "))
		}
		c.q.Cols[x] = col
		return col.Type, nil
	case *parse.Unary:
		t, err := c.expr(x.X, aggOK)
		if err != nil {
			return 0, err
		}
		if x.Op == "NOT" {
			if t != TBool {
				return 0, c.errf(x.X, "NOT needs a condition, found a %s", t)
			}
			return TBool, nil
		}
		if !numeric(t) {
			return 0, c.errf(x.X, "unary minus needs a number, found a %s", t)
		}
		return t, nil
	case *parse.Binary:
		lt, err := c.expr(x.L, aggOK)
		if err != nil {
			return 0, err
		}
		rt, err := c.expr(x.R, aggOK)
		if err != nil {
			return 0, err
		}
		switch x.Op {
		case "AND", "OR":
			if lt != TBool {
				return 0, c.errf(x.L, "%s needs conditions on both sides, found a %s", x.Op, lt)
			}
			if rt != TBool {
				return 0, c.errf(x.R, "%s needs conditions on both sides, found a %s", x.Op, rt)
			}
			return TBool, nil
		case "+", "-", "*", "/", "%":
			if !numeric(lt) {
				return 0, c.errf(x.L, "%s needs numbers, found a %s", x.Op, lt)
			}
			if !numeric(rt) {
				return 0, c.errf(x.R, "%s needs numbers, found a %s", x.Op, rt)
			}
			if lt == TFloat || rt == TFloat {
				return TFloat, nil
			}
			return TInt, nil
		default: // comparisons
			if lt == THist || lt == TBool {
				return 0, c.errf(x.L, "cannot compare a %s", lt)
			}
			if rt == THist || rt == TBool {
				return 0, c.errf(x.R, "cannot compare a %s", rt)
			}
			if numeric(lt) != numeric(rt) {
				return 0, c.errf(x.R, "type mismatch: %s %s %s", lt, x.Op, rt)
			}
			if lt == TStr && x.Op != "=" && x.Op != "!=" {
				return 0, c.errf(x, "strings compare only with = and != (or LIKE)")
			}
			return TBool, nil
		}
	case *parse.In:
		t, err := c.expr(x.X, aggOK)
		if err != nil {
			return 0, err
		}
		if t != TInt && t != TStr {
			return 0, c.errf(x.X, "IN needs an integer or string, found a %s", t)
		}
		for _, v := range x.List {
			vt, err := c.expr(v, false)
			if err != nil {
				return 0, err
			}
			_, lit := v.(*parse.IntLit)
			_, slit := v.(*parse.StrLit)
			if !lit && !slit {
				return 0, c.errf(v, "IN lists hold literals")
			}
			if vt != t {
				return 0, c.errf(v, "type mismatch: %s IN list holds a %s", t, vt)
			}
		}
		return TBool, nil
	case *parse.Between:
		for _, s := range []parse.Expr{x.X, x.Lo, x.Hi} {
			t, err := c.expr(s, aggOK)
			if err != nil {
				return 0, err
			}
			if !numeric(t) {
				return 0, c.errf(s, "BETWEEN needs numbers, found a %s", t)
			}
		}
		return TBool, nil
	case *parse.Like:
		t, err := c.expr(x.X, aggOK)
		if err != nil {
			return 0, err
		}
		if t != TStr {
			return 0, c.errf(x.X, "LIKE needs a string, found a %s", t)
		}
		if i := strings.IndexAny(x.Pattern.V, "%_"); i >= 0 && (i != len(x.Pattern.V)-1 || x.Pattern.V[i] != '%') {
			return 0, c.errf(x.Pattern, "LIKE supports 'prefix%%' patterns only")
		}
		return TBool, nil
	case *parse.Call:
		if !aggOK {
			return 0, c.errf(e, "aggregate %s is not allowed here (only in SELECT, HAVING and ORDER BY)", x.Name)
		}
		want := 1
		if x.Name == "QUANTILE" {
			want = 2
		}
		if !x.Star && len(x.Args) != want {
			return 0, c.errf(e, "%s takes %d argument(s)", x.Name, want)
		}
		var at Type
		if !x.Star {
			var err error
			if at, err = c.expr(x.Args[0], false); err != nil {
				return 0, err
			}
			if at == TBool {
				return 0, c.errf(x.Args[0], "%s of a condition is not supported", x.Name)
			}
		}
		if x.Name != "COUNT" && !numeric(at) {
			return 0, c.errf(x.Args[0], "%s needs a number, found a %s", x.Name, at)
		}
		if x.Name == "QUANTILE" {
			f, ok := x.Args[1].(*parse.FloatLit)
			if !ok || f.V <= 0 || f.V >= 1 {
				return 0, c.errf(x.Args[1], "QUANTILE's fraction is a decimal between 0 and 1, like 0.99")
			}
		}
		c.q.AggIndex[x] = len(c.q.Aggs)
		c.q.Aggs = append(c.q.Aggs, x)
		switch x.Name {
		case "COUNT", "SUM", "MIN", "MAX":
			return TInt, nil
		case "HIST":
			return THist, nil
		}
		return TFloat, nil
	}
	return 0, c.errf(e, "unsupported expression")
}

// grouped checks that e reads columns only through GROUP BY keys or
// aggregates.
func (c *checker) grouped(e parse.Expr, keys map[string]bool) error {
	if keys[Key(e)] {
		return nil
	}
	switch x := e.(type) {
	case *parse.Col:
		return c.errf(e, "column %s must appear in GROUP BY or inside an aggregate", x.Name)
	case *parse.Call:
		return nil
	case *parse.Unary:
		return c.grouped(x.X, keys)
	case *parse.Binary:
		if err := c.grouped(x.L, keys); err != nil {
			return err
		}
		return c.grouped(x.R, keys)
	case *parse.In:
		return c.grouped(x.X, keys)
	case *parse.Between:
		for _, s := range []parse.Expr{x.X, x.Lo, x.Hi} {
			if err := c.grouped(s, keys); err != nil {
				return err
			}
		}
	case *parse.Like:
		return c.grouped(x.X, keys)
	}
	return nil
}

// Key is a canonical text of e, for matching expressions structurally.
func Key(e parse.Expr) string {
	switch x := e.(type) {
	case *parse.IntLit:
		return fmt.Sprint(x.V)
	case *parse.FloatLit:
		return fmt.Sprint(x.V)
	case *parse.StrLit:
		return fmt.Sprintf("%q", x.V)
	case *parse.Col:
		return x.Name
	case *parse.Unary:
		return "(" + x.Op + " " + Key(x.X) + ")"
	case *parse.Binary:
		return "(" + Key(x.L) + " " + x.Op + " " + Key(x.R) + ")"
	case *parse.Call:
		s := x.Name + "("
		if x.Star {
			s += "*"
		}
		if x.Distinct {
			s += "DISTINCT "
		}
		for i, a := range x.Args {
			if i > 0 {
				s += ","
			}
			s += Key(a)
		}
		return s + ")"
	case *parse.In:
		s := Key(x.X) + fmt.Sprintf(" IN%v(", x.Not)
		for _, v := range x.List {
			s += Key(v) + ","
		}
		return s + ")"
	case *parse.Between:
		return fmt.Sprintf("%s BETWEEN%v %s %s", Key(x.X), x.Not, Key(x.Lo), Key(x.Hi))
	case *parse.Like:
		return fmt.Sprintf("%s LIKE%v %q", Key(x.X), x.Not, x.Pattern.V)
	}
	return "?"
}
