package exec

import (
	"io"
	"sort"

	"github.com/cistern-ebpf/cistern/query/kern"
	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/sema"
)

// maxPending bounds the user-space entry/exit join (MVSF plans): entries
// whose exit never comes (exit_group, execve) are dropped past it.
const maxPending = 1 << 18

type group struct {
	rep  Rec
	accs []acc
}

type outRow struct {
	vals []Value
	keys []Value
}

// Engine runs the user-space operators of one plan.
type Engine struct {
	q        *sema.Query
	en       env
	where    parse.Expr // the part of WHERE not done in the kernel
	w        *writer
	windowed bool
	groups   map[string]*group
	gorder   []string
	rows     []outRow // ORDER BY without grouping: kept until the end
	emitted  int64
	pending  map[uint64]*[kern.NSaved]uint64
	kbuf     []byte
	vbuf     []Value
	plot     *plotter
	matched  uint64
	rnd      uint64
	done     bool
}

// New builds the user half; where is the residual WHERE (nil: none).
func New(q *sema.Query, where parse.Expr, out io.Writer, format string) *Engine {
	var names []string
	var kinds []colKind
	if q.Window > 0 {
		names = append(names, "window_end_ns")
		kinds = append(kinds, colClock)
	}
	for _, it := range q.Items {
		names = append(names, it.Name)
		kinds = append(kinds, itemKind(q, it))
	}
	return &Engine{q: q, en: env{q}, where: where, w: newWriter(out, format, names, kinds, q.Window > 0), windowed: q.Window > 0,
		groups: map[string]*group{}, pending: map[uint64]*[kern.NSaved]uint64{}, rnd: 1}
}

// Matched counts rows that passed the user-side WHERE.
func (e *Engine) Matched() uint64 { return e.matched }

// Rows counts the rows written (a table's header, and the lines of its
// histogram blocks, are not rows).
func (e *Engine) Rows() int { return e.w.rows }

// Done reports that LIMIT was reached on a streaming query.
func (e *Engine) Done() bool { return e.done }

// Record takes one ring-buffer record: kind, then slots (all of them, or
// the projected ones listed in proj).
func (e *Engine) Record(kind uint64, slots []uint64, proj []int) {
	var r Rec
	switch kind {
	case kern.KindProj:
		for i, s := range proj {
			if i < len(slots) {
				r[s] = slots[i]
			}
		}
	default:
		copy(r[:], slots)
	}
	switch kind {
	case kern.KindEnter:
		if len(e.pending) >= maxPending {
			clear(e.pending)
		}
		var saved [kern.NSaved]uint64
		copy(saved[:], r[:kern.NSaved])
		e.pending[r[kern.HalfKey]] = &saved
		return
	case kern.KindExit:
		ent, ok := e.pending[r[kern.HalfKey]]
		if !ok {
			return
		}
		delete(e.pending, r[kern.HalfKey])
		var full Rec
		copy(full[:], ent[:])
		for _, s := range e.q.Table.Exit {
			full[s] = r[s]
		}
		full[15] = full[14] - full[0]
		r = full
	}
	e.Row(&r)
}

// Row runs one complete source row through WHERE and then aggregation or
// output.
func (e *Engine) Row(r *Rec) {
	if e.done {
		return
	}
	if e.where != nil && !e.en.eval(e.where, r, nil).truth() {
		return
	}
	e.matched++
	if e.q.Grouped {
		g := e.group(r)
		for i, c := range e.q.Aggs {
			var v Value
			if !c.Star {
				v = e.en.eval(c.Args[0], r, nil)
			}
			g.accs[i].add(c, v, &e.rnd)
		}
		return
	}
	if len(e.q.Order) == 0 {
		// streamed: the row is written at once, so its values are reused
		vals := e.vbuf[:0]
		for _, it := range e.q.Items {
			vals = append(vals, e.en.eval(it.Expr, r, nil))
		}
		e.vbuf = vals
		e.w.row(vals)
		e.emitted++
		if e.q.Limit > 0 && e.emitted >= e.q.Limit {
			e.done = true
		}
		return
	}
	vals := make([]Value, len(e.q.Items))
	for i, it := range e.q.Items {
		vals[i] = e.en.eval(it.Expr, r, nil)
	}
	keys := make([]Value, len(e.q.Order))
	for i, o := range e.q.Order {
		keys[i] = e.en.eval(o.Expr, r, nil)
	}
	e.rows = append(e.rows, outRow{vals, keys})
	if lim := int(e.q.Limit); lim > 0 && len(e.rows) > 4*lim+1024 {
		e.sortRows()
		e.rows = e.rows[:lim]
	}
}

func (e *Engine) group(r *Rec) *group {
	kb := e.kbuf[:0]
	for _, gexpr := range e.q.GroupBy {
		kb = e.en.eval(gexpr, r, nil).appendKey(kb)
	}
	e.kbuf = kb
	g := e.groups[string(kb)] // no allocation for the lookup
	if g == nil {
		k := string(kb)
		g = &group{rep: *r, accs: make([]acc, len(e.q.Aggs))}
		e.groups[k] = g
		e.gorder = append(e.gorder, k)
	}
	return g
}

// Partial folds one kernel partial aggregate in: keys are the slots the
// kernel grouped by, k their values.
func (e *Engine) Partial(keys []int, p kern.Partial) {
	var r Rec
	for i, s := range keys {
		r[s] = p.K[i]
	}
	g := e.group(&r)
	signed := false
	for _, c := range e.q.Aggs {
		if !c.Star {
			if col, ok := c.Args[0].(*parse.Col); ok && e.q.Cols[col] != nil && e.q.Cols[col].R == sema.RInt {
				signed = true
			}
		}
	}
	for _, v := range p.Per {
		if v.Count == 0 {
			continue
		}
		e.matched += v.Count
		h := v.Hist
		for i := range g.accs {
			mn, mx := int64(v.Min), int64(v.Max)
			if !signed && (mn < 0 || mx < 0) { // unsigned beyond int64: clamp
				mn, mx = clampU(v.Min), clampU(v.Max)
			}
			g.accs[i].merge(int64(v.Count), int64(v.Sum), mn, mx, &h)
		}
	}
}

func clampU(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}

func (e *Engine) sortRows() {
	sort.SliceStable(e.rows, func(i, j int) bool {
		for k, o := range e.q.Order {
			c := cmp(e.rows[i].keys[k], e.rows[j].keys[k])
			if c != 0 {
				return (c < 0) != o.Desc
			}
		}
		return false
	})
}

// Window closes the groups (a window, or the end of the run) and writes
// them: HAVING, ORDER BY, LIMIT.
func (e *Engine) Window(endNs int64) error {
	if !e.q.Grouped {
		return nil
	}
	e.rows = e.rows[:0]
	if len(e.groups) == 0 && len(e.q.GroupBy) == 0 {
		// an aggregate over no rows is still one row (COUNT(*) = 0)
		e.group(&Rec{})
	}
	for _, k := range e.gorder {
		g := e.groups[k]
		aggs := make([]Value, len(e.q.Aggs))
		for i, c := range e.q.Aggs {
			aggs[i] = g.accs[i].result(c)
		}
		if e.q.Having != nil && !e.en.eval(e.q.Having, &g.rep, aggs).truth() {
			continue
		}
		var vals []Value
		if e.windowed {
			vals = append(vals, intV(endNs))
		}
		for _, it := range e.q.Items {
			vals = append(vals, e.en.eval(it.Expr, &g.rep, aggs))
		}
		keys := make([]Value, len(e.q.Order))
		for i, o := range e.q.Order {
			keys[i] = e.en.eval(o.Expr, &g.rep, aggs)
		}
		e.rows = append(e.rows, outRow{vals, keys})
	}
	e.sortRows()
	e.fitRows()
	for i, r := range e.rows {
		if e.q.Limit > 0 && int64(i) >= e.q.Limit {
			break
		}
		if err := e.w.row(r.vals); err != nil {
			return err
		}
		if e.plot != nil {
			vals := r.vals
			if e.windowed {
				vals = vals[1:]
			}
			e.plot.add(endNs, vals)
		}
	}
	e.rows = e.rows[:0]
	clear(e.groups)
	e.gorder = e.gorder[:0]
	return e.w.flush()
}

func (e *Engine) fitRows() {
	n := len(e.rows)
	if e.q.Limit > 0 && int64(n) > e.q.Limit {
		n = int(e.q.Limit)
	}
	vals := make([][]Value, n)
	for i := range vals {
		vals[i] = e.rows[i].vals
	}
	e.w.fit(vals)
}

// Finish writes what is left: the last window or the ordered rows.
func (e *Engine) Finish(endNs int64) error {
	if e.q.Grouped {
		return e.Window(endNs)
	}
	if len(e.q.Order) > 0 {
		e.sortRows()
		e.fitRows()
		for i, r := range e.rows {
			if e.q.Limit > 0 && int64(i) >= e.q.Limit {
				break
			}
			if err := e.w.row(r.vals); err != nil {
				return err
			}
		}
	}
	return e.w.flush()
}

// Flush pushes buffered streaming output out.
func (e *Engine) Flush() error { return e.w.flush() }
