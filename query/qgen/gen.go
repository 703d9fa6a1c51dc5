// Package qgen generates random queries over the whole schema: valid ones
// (every one must compile, load and run) and invalid ones (every one must
// fail with a positioned error). Seeded, so a failure reproduces.
package qgen

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"

	"github.com/cistern-ebpf/cistern/query/sema"
)

// UprobeSource is the uprobe table function the generator uses: a libc
// function every process calls now and then.
const UprobeSource = "uprobe('libc', 'getpid')"

type gen struct {
	r    *rand.Rand
	t    *sema.Table
	ints []*sema.Column
	strs []*sema.Column
}

func newGen(r *rand.Rand) *gen {
	names := sema.TableNames()
	t := sema.Tables[names[r.Intn(len(names))]]
	g := &gen{r: r, t: t}
	for _, c := range t.Cols {
		if c.Type == sema.TInt {
			g.ints = append(g.ints, c)
		} else {
			g.strs = append(g.strs, c)
		}
	}
	return g
}

func (g *gen) from() string {
	if g.t.Name == "uprobe" {
		return UprobeSource
	}
	return g.t.Name
}

func (g *gen) pick(n int) int { return g.r.Intn(n) }

func (g *gen) intCol() *sema.Column { return g.ints[g.pick(len(g.ints))] }

func (g *gen) intLit() string {
	switch g.pick(5) {
	case 0:
		return "0"
	case 1:
		return fmt.Sprint(g.pick(10))
	case 2:
		return fmt.Sprint(-g.pick(100))
	case 3:
		return fmt.Sprint(g.r.Int63n(1 << 40))
	}
	return fmt.Sprint(g.pick(100000))
}

// strLit returns a literal that suits c: a real enum value or comm most of
// the time, so that pushed-down equality is exercised on matching rows.
func (g *gen) strLit(c *sema.Column) string {
	if c.R == sema.REnum && g.pick(4) > 0 {
		var vs []string
		for _, v := range c.Enum {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		return "'" + vs[g.pick(len(vs))] + "'"
	}
	return "'" + []string{"bash", "cistern", "kworker/0:1", "x", "", "read", "systemd-journal", "fio"}[g.pick(8)] + "'"
}

func (g *gen) intExpr(depth int) string {
	if depth > 1 || g.pick(3) > 0 {
		if g.pick(6) == 0 {
			return g.intLit()
		}
		return g.intCol().Name
	}
	op := []string{"+", "-", "*", "/", "%"}[g.pick(5)]
	return "(" + g.intExpr(depth+1) + " " + op + " " + g.intExpr(depth+1) + ")"
}

func (g *gen) pred(depth int) string {
	if depth < 2 && g.pick(4) == 0 {
		switch g.pick(3) {
		case 0:
			return "(" + g.pred(depth+1) + " OR " + g.pred(depth+1) + ")"
		case 1:
			return "NOT (" + g.pred(depth+1) + ")"
		default:
			return g.pred(depth+1) + " AND " + g.pred(depth+1)
		}
	}
	if len(g.strs) > 0 && g.pick(3) == 0 {
		c := g.strs[g.pick(len(g.strs))]
		switch g.pick(4) {
		case 0:
			return c.Name + " = " + g.strLit(c)
		case 1:
			return c.Name + " != " + g.strLit(c)
		case 2:
			l := strings.Trim(g.strLit(c), "'")
			if len(l) > 3 {
				l = l[:1+g.pick(3)]
			}
			// '_' is LIKE's one-character wildcard, which the engine does
			// not take ('prefix%' only): cut the prefix before it.
			if i := strings.IndexByte(l, '_'); i >= 0 {
				l = l[:i]
			}
			if l == "" {
				return c.Name + " = " + g.strLit(c)
			}
			not := ""
			if g.pick(4) == 0 {
				not = "NOT "
			}
			return c.Name + " " + not + "LIKE '" + l + "%'"
		default:
			n := 1 + g.pick(5)
			var vs []string
			for i := 0; i < n; i++ {
				vs = append(vs, g.strLit(c))
			}
			return c.Name + " IN (" + strings.Join(vs, ", ") + ")"
		}
	}
	c := g.intCol().Name
	switch g.pick(5) {
	case 0:
		lo := g.pick(1000)
		return fmt.Sprintf("%s BETWEEN %d AND %d", c, lo, lo+g.pick(1<<20))
	case 1:
		n := 1 + g.pick(5)
		var vs []string
		for i := 0; i < n; i++ {
			vs = append(vs, g.intLit())
		}
		not := ""
		if g.pick(3) == 0 {
			not = "NOT "
		}
		return c + " " + not + "IN (" + strings.Join(vs, ", ") + ")"
	case 2:
		return g.intExpr(0) + " " + []string{"=", "!=", "<", "<=", ">", ">="}[g.pick(6)] + " " + g.intExpr(0)
	}
	return c + " " + []string{"=", "!=", "<", "<=", ">", ">=", "<>"}[g.pick(7)] + " " + g.intLit()
}

func (g *gen) where() string {
	if g.pick(3) == 0 {
		return ""
	}
	return " WHERE " + g.pred(0)
}

func (g *gen) anyCol() *sema.Column { return g.t.Cols[g.pick(len(g.t.Cols))] }

// Valid returns a random valid query.
func Valid(r *rand.Rand) string {
	g := newGen(r)
	if g.pick(2) == 0 {
		return g.plain()
	}
	return g.grouped()
}

func (g *gen) plain() string {
	if g.pick(12) == 0 {
		return "SELECT * FROM " + g.from() + g.where() + " LIMIT " + fmt.Sprint(1+g.pick(50))
	}
	var items []string
	n := 1 + g.pick(4)
	for i := 0; i < n; i++ {
		var e string
		switch g.pick(4) {
		case 0:
			e = g.intExpr(0)
		case 1:
			e = g.pred(1)
		default:
			e = g.anyCol().Name
		}
		items = append(items, fmt.Sprintf("%s AS c%d", e, i))
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + g.from() + g.where()
	if g.pick(3) == 0 {
		q += fmt.Sprintf(" ORDER BY c%d", g.pick(n))
		if g.pick(2) == 0 {
			q += " DESC"
		}
	}
	if g.pick(2) == 0 {
		q += fmt.Sprintf(" LIMIT %d", 1+g.pick(100))
	}
	return q
}

func (g *gen) agg(same *sema.Column) string {
	c := g.intCol()
	if same != nil {
		c = same
	}
	switch g.pick(9) {
	case 0:
		return "COUNT(*)"
	case 1:
		return "COUNT(" + g.anyCol().Name + ")"
	case 2:
		return "SUM(" + c.Name + ")"
	case 3:
		return "MIN(" + c.Name + ")"
	case 4:
		return "MAX(" + c.Name + ")"
	case 5:
		return "AVG(" + c.Name + ")"
	case 6:
		return "HIST(" + c.Name + ")"
	case 7:
		if same == nil {
			return fmt.Sprintf("QUANTILE(%s, 0.%d)", c.Name, 1+g.pick(98))
		}
		return "COUNT(*)"
	}
	if same == nil {
		return "COUNT(DISTINCT " + g.anyCol().Name + ")"
	}
	return "MAX(" + c.Name + ")"
}

func (g *gen) grouped() string {
	var keys []string
	nk := g.pick(3)
	seen := map[string]bool{}
	for i := 0; i < nk; i++ {
		c := g.anyCol()
		if !seen[c.Name] {
			seen[c.Name] = true
			keys = append(keys, c.Name)
		}
	}
	var same *sema.Column
	if g.pick(2) == 0 {
		same = g.intCol() // every aggregate over one column: kernel-aggregatable
	}
	var items []string
	for _, k := range keys {
		items = append(items, k)
	}
	na := 1 + g.pick(3)
	orderable := -1
	for i := 0; i < na; i++ {
		a := g.agg(same)
		if orderable < 0 && !strings.HasPrefix(a, "HIST") {
			orderable = i
		}
		items = append(items, fmt.Sprintf("%s AS a%d", a, i))
	}
	if g.pick(6) == 0 {
		items = append(items, fmt.Sprintf("COUNT(*) * 2 + 1 AS a%d", na))
		na++
	}
	q := "SELECT " + strings.Join(items, ", ") + " FROM " + g.from()
	if same == nil || g.pick(2) == 0 {
		q += g.where()
	} else if g.pick(2) == 0 {
		q += " WHERE " + g.intCol().Name + " >= " + g.intLit()
	}
	if len(keys) > 0 {
		q += " GROUP BY " + strings.Join(keys, ", ")
	}
	if g.pick(3) == 0 {
		q += fmt.Sprintf(" WINDOW %dms", 10+g.pick(20))
	}
	if g.pick(4) == 0 {
		q += fmt.Sprintf(" HAVING COUNT(*) > %d", g.pick(3))
	}
	if orderable >= 0 && g.pick(2) == 0 {
		q += fmt.Sprintf(" ORDER BY a%d DESC", orderable)
	}
	if g.pick(2) == 0 {
		q += fmt.Sprintf(" LIMIT %d", 1+g.pick(20))
	}
	return q
}

// Invalid returns a random invalid query and what is wrong with it.
func Invalid(r *rand.Rand) (string, string) {
	g := newGen(r)
	ic, sc := g.intCol().Name, ""
	if len(g.strs) > 0 {
		sc = g.strs[g.pick(len(g.strs))].Name
	}
	from := g.from()
	cases := []struct{ why, q string }{
		{"unknown column", "SELECT nosuch_col FROM " + from},
		{"unknown table", "SELECT pid FROM no_such_table"},
		{"unknown column in WHERE", "SELECT pid FROM " + from + " WHERE bogus > 1"},
		{"type mismatch", "SELECT pid FROM " + from + " WHERE " + ic + " = 'text'"},
		{"aggregate in WHERE", "SELECT pid FROM " + from + " WHERE COUNT(*) > 1"},
		{"aggregate in GROUP BY", "SELECT COUNT(*) FROM " + from + " GROUP BY MAX(" + ic + ")"},
		{"ungrouped column", "SELECT " + ic + ", COUNT(*) FROM " + from + " GROUP BY comm HAVING COUNT(*) > 0 LIMIT 1"},
		{"HAVING without aggregates", "SELECT pid FROM " + from + " HAVING pid > 1"},
		{"WINDOW without aggregates", "SELECT pid FROM " + from + " WINDOW 1s"},
		{"missing FROM", "SELECT pid " + from},
		{"bad LIMIT", "SELECT pid FROM " + from + " LIMIT 0"},
		{"unterminated string", "SELECT pid FROM " + from + " WHERE comm = 'abc"},
		{"stray character", "SELECT pid FROM " + from + " WHERE pid ? 3"},
		{"SUM of a string", "SELECT SUM(comm) FROM " + from},
		{"nested aggregate", "SELECT MAX(COUNT(*)) FROM " + from},
		{"QUANTILE fraction", "SELECT QUANTILE(" + ic + ", 2) FROM " + from},
		{"unknown function", "SELECT foo(" + ic + ") FROM " + from},
		{"WHERE not a condition", "SELECT pid FROM " + from + " WHERE " + ic + " + 1"},
		{"LIKE pattern", "SELECT pid FROM " + from + " WHERE comm LIKE '%x'"},
		{"bad WINDOW unit", "SELECT COUNT(*) FROM " + from + " WINDOW 5m"},
		{"trailing junk", "SELECT pid FROM " + from + " LIMIT 3 garbage"},
		{"duplicate output name", "SELECT pid, tid AS pid FROM " + from},
		{"table function on a table", "SELECT pid FROM sched_switch('x', 'y')"},
		{"uprobe without binary", "SELECT pid FROM uprobe('/nonexistent/bin', 'main')"},
		{"uprobe without symbol", "SELECT pid FROM uprobe('libc', 'no_such_symbol_xyz')"},
		{"DISTINCT outside COUNT", "SELECT SUM(DISTINCT " + ic + ") FROM " + from},
		{"ORDER BY histogram", "SELECT HIST(" + ic + ") AS h FROM " + from + " ORDER BY h"},
		{"empty select", "SELECT FROM " + from},
		{"NOT on a number", "SELECT pid FROM " + from + " WHERE NOT " + ic},
		{"IN list of columns", "SELECT pid FROM " + from + " WHERE pid IN (tid, 3)"},
	}
	if sc != "" {
		cases = append(cases,
			struct{ why, q string }{"string less-than", "SELECT pid FROM " + from + " WHERE " + sc + " < 'a'"},
			struct{ why, q string }{"arithmetic on a string", "SELECT " + sc + " + 1 FROM " + from})
	}
	c := cases[g.pick(len(cases))]
	return c.q, c.why
}
