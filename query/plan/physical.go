package plan

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cistern-ebpf/cistern/query/kern"
	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/sema"
)

// Physical is one way to split the query.
type Physical struct {
	Name     string
	Kernel   kern.Config
	Residual parse.Expr // WHERE left to user space
	KernOps  []string
	UserOps  []string
	Cost     float64 // estimated CPU ns per second of tracing
	Outcome  string
}

// Aggregated reports whether the kernel keeps partial aggregates.
func (p *Physical) Aggregated() bool { return p.Kernel.Emit == kern.EmitAgg }

// Per-operator costs in ns per event, measured on this class of machine
// with the templates (see docs/query.md); they only need to rank plans.
const (
	costHook     = 45.0  // tracepoint/uprobe entry into one program
	costRead     = 15.0  // record setup and hook fields
	costComm     = 30.0  // bpf_get_current_comm
	costCgroup   = 10.0  // bpf_get_current_cgroup_id
	costClause   = 3.0   // one pushed comparison
	costJoin     = 110.0 // per-thread map update at entry, lookup+delete at exit
	costRing     = 60.0  // ringbuf reserve+submit
	costRingByte = 0.15  // copy into the ring
	costUser     = 250.0 // user space: read, decode, evaluate one record
	costUserByte = 0.5
	costAgg      = 70.0 // per-CPU hash lookup and update
)

// Candidates enumerates the physical plans of q, MVSF-only first.
// mvsfOnly restricts them to the MVSF plan.
func Candidates(q *sema.Query, mvsfOnly bool) []*Physical {
	a := analyse(q)
	joined := q.Table.Joined
	base := kern.Config{Object: q.Table.Object, Binary: q.Binary, Symbol: q.Symbol, RingBytes: 1 << 22}
	mvsf := &Physical{Name: "mvsf", Kernel: base, Residual: q.Where}
	mvsf.Kernel.Emit, mvsf.Kernel.NeedComm, mvsf.Kernel.NeedCgroup, mvsf.Kernel.NeedArgs = kern.EmitFull, true, true, true
	// every event crosses: room for bursts while user space is descheduled
	mvsf.Kernel.RingBytes = 1 << 26
	mvsf.Kernel.FullSlots = q.Table.Width()
	mvsf.KernOps = []string{"read every field", "emit to ring buffer"}
	if joined {
		mvsf.KernOps = []string{"read every field at entry and exit", "emit both halves"}
		mvsf.UserOps = append(mvsf.UserOps, "join entry/exit")
	}
	mvsf.UserOps = append(mvsf.UserOps, a.userOps(q.Where != nil, false)...)
	out := []*Physical{mvsf}
	if mvsfOnly {
		return out
	}
	needSlot := func(slots []int, s int) bool {
		for _, x := range slots {
			if x == s {
				return true
			}
		}
		return false
	}
	type variant struct{ filter, proj, agg bool }
	var vs []variant
	for _, f := range []bool{false, true} {
		if f && len(a.push) == 0 {
			continue
		}
		vs = append(vs, variant{f, false, false}, variant{f, true, false})
		if a.aggOK && (f || len(a.conj) == 0) {
			vs = append(vs, variant{f, false, true})
		}
	}
	for _, v := range vs {
		if !joined && !v.filter && !v.proj && !v.agg {
			continue // the same as MVSF
		}
		p := &Physical{Kernel: base}
		var name []string
		k := &p.Kernel
		k.Join = joined
		if joined {
			name = append(name, "join")
			p.KernOps = append(p.KernOps, "join entry/exit per key")
		}
		var residual []parse.Expr
		if v.filter {
			name = append(name, "filter")
			var texts []string
			for _, pu := range a.push {
				k.Clauses = append(k.Clauses, pu.clauses...)
				texts = append(texts, pu.text)
			}
			p.KernOps = append(p.KernOps, "filter "+strings.Join(texts, " AND "))
			residual = a.residual
		} else {
			residual = a.conj
		}
		p.Residual = and(residual)
		slots := a.needed
		if !v.filter {
			slots = slotsOfExprs(q, a.conj, slots)
		}
		switch {
		case v.agg:
			name = append(name, "agg")
			k.Emit, k.Keys, k.AggSlot, k.Hist = kern.EmitAgg, a.keys, a.aggSlot, a.hist
			k.AggSigned = a.aggCol != nil && a.aggCol.R == sema.RInt
			slots = append(append([]int{}, a.keys...), a.aggSlot)
			what := "COUNT"
			if a.aggCol != nil {
				what = "COUNT/SUM/MIN/MAX"
				if a.hist {
					what += "/HIST"
				}
				what += " of " + a.aggCol.Name
			}
			by := ""
			if len(a.keyText) > 0 {
				by = " by (" + strings.Join(a.keyText, ", ") + ")"
			}
			p.KernOps = append(p.KernOps, "partial "+what+by+" in per-CPU hash")
			p.UserOps = append(p.UserOps, "merge per-CPU partials")
		case v.proj:
			if len(slots) > kern.MaxProj || len(slots) == 0 {
				continue
			}
			k.RingBytes = 1 << 25 // streams: absorb bursts (about 800k records)
			name = append(name, "project")
			k.Emit, k.Proj = kern.EmitProj, slots
			p.KernOps = append(p.KernOps, fmt.Sprintf("project %d of %d slots, emit", len(slots), kern.NSlot))
		default:
			k.Emit, k.FullSlots, k.RingBytes = kern.EmitFull, q.Table.Width(), 1<<25
			slots = allSlots()
			p.KernOps = append(p.KernOps, "emit whole record")
		}
		var cls []int
		for _, c := range k.Clauses {
			cls = append(cls, c.Slot)
		}
		k.NeedComm = needSlot(slots, 4) || needSlot(cls, 4)
		k.NeedCgroup = needSlot(slots, 3) || needSlot(cls, 3)
		if joined {
			// the join keeps only the entry slots the plan reads or filters on
			firstExit := kern.NSaved
			for _, s := range q.Table.Exit {
				firstExit = min(firstExit, s)
			}
			k.Saved = 1 // slot 0: the entry time
			for _, s := range append(append([]int{}, slots...), cls...) {
				if s < firstExit {
					k.Saved = max(k.Saved, s+1)
				}
			}
		}
		for s := 7; s <= 12; s++ { // arg0-arg5 of syscalls
			k.NeedArgs = k.NeedArgs || needSlot(slots, s) || needSlot(cls, s)
		}
		p.Name = strings.Join(name, "+")
		p.UserOps = append(p.UserOps, a.userOps(len(residual) > 0, v.agg)...)
		out = append(out, p)
	}
	return out
}

func allSlots() []int {
	s := make([]int, kern.NSlot)
	for i := range s {
		s[i] = i
	}
	return s
}

func slotsOfExprs(q *sema.Query, es []parse.Expr, have []int) []int {
	a := &analysis{q: q, residual: es}
	set := map[int]bool{}
	for _, s := range have {
		set[s] = true
	}
	for _, s := range a.slotsUsed() {
		set[s] = true
	}
	var out []int
	for s := range set {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

func (a *analysis) userOps(where, aggInKernel bool) []string {
	q := a.q
	var ops []string
	if where {
		ops = append(ops, "filter")
	}
	if q.Grouped && !aggInKernel {
		ops = append(ops, "aggregate")
	}
	if q.Window > 0 {
		ops = append(ops, "window "+q.Window.String())
	}
	if q.Having != nil {
		ops = append(ops, "having")
	}
	if len(q.Order) > 0 {
		ops = append(ops, "order")
	}
	if q.Limit > 0 {
		ops = append(ops, fmt.Sprintf("limit %d", q.Limit))
	}
	return append(ops, "project")
}

// Estimate fills p.Cost for the sampled event rate (for entry/exit tables,
// completed pairs per second) and, when the sample saw enough events, its
// selectivities; otherwise each pushed clause counts with its default.
func Estimate(q *sema.Query, p *Physical, smp Sample) {
	a := analyse(q)
	k := &p.Kernel
	rate := max(smp.Rate, 1) // an idle hook still ranks plans by per-event cost
	halves := 1.0
	if q.Table.Joined {
		halves = 2
	}
	read := costRead
	if k.NeedComm {
		read += costComm
	}
	if k.NeedCgroup {
		read += costCgroup
	}
	per := halves * (costHook + read)
	sel, enterSel := 1.0, 1.0
	if len(k.Clauses) > 0 {
		per += costClause * float64(len(k.Clauses))
		if smp.Selective() {
			// A sample in which nothing passed says "rare", not "never": a
			// zero would price every emission the same (nothing) and tie
			// kernel aggregation with shipping rows. 1/(n+1) keeps the order.
			floor := 1 / float64(smp.Events+1)
			sel, enterSel = max(smp.Sel, floor), max(smp.EnterSel, floor)
		} else {
			for _, pu := range a.push {
				sel *= pu.sel
				if pu.clauses[0].Enter {
					enterSel *= pu.sel
				}
			}
		}
	}
	if q.Table.Joined && k.Join {
		per += costJoin * enterSel
	}
	emits := sel
	if q.Table.Joined && !k.Join {
		emits = 2 // both halves, unfiltered
	}
	switch k.Emit {
	case kern.EmitFull:
		b := 8.0 * float64(k.FullSlots+1)
		per += emits * (costRing + b*costRingByte + costUser + b*costUserByte)
	case kern.EmitProj:
		b := 8.0 * float64(len(k.Proj))
		per += emits * (costRing + b*costRingByte + costUser + b*costUserByte)
	case kern.EmitAgg:
		per += sel * costAgg
	}
	p.Cost = rate * per
}

// Sample is what the optimizer measured of a query's hooks: events per
// second and, when the query has pushable clauses, the fraction of events
// that pass them all (Sel) and that pass the entry-time ones (EnterSel).
type Sample struct {
	Rate          float64
	Events        uint64 // events the sample saw
	Sel, EnterSel float64
	Filtered      bool // the sample ran the pushed clauses
}

// minSampleEvents is how many events a sample needs before its
// selectivities replace the defaults.
const minSampleEvents = 100

// Selective says whether s's selectivities are measured, not defaults.
func (s Sample) Selective() bool { return s.Filtered && s.Events >= minSampleEvents }

// samples caches samples per hook and clause set.
var samples = struct {
	sync.Mutex
	m map[string]sampleAt
}{m: map[string]sampleAt{}}

type sampleAt struct {
	s  Sample
	at time.Time
}

// SampleHooks measures, for window, how many events per second the query's
// hooks see and how many pass its pushed clauses: it loads the plan that
// filters in the kernel with emission off (nothing crosses to user space).
// Cached for a minute per hook and clause set.
func SampleHooks(q *sema.Query, window time.Duration) (Sample, bool, error) {
	cfg := kern.Config{Object: q.Table.Object, Binary: q.Binary, Symbol: q.Symbol}
	for _, p := range Candidates(q, false) {
		if len(p.Kernel.Clauses) > 0 && p.Kernel.Emit != kern.EmitAgg {
			cfg = p.Kernel // any filtering plan: the clauses and what they read
			break
		}
	}
	cfg.Emit, cfg.RingBytes, cfg.Proj, cfg.Keys = kern.EmitNone, 4096, nil, nil
	cfg.Join = cfg.Join && len(cfg.Clauses) > 0 // the join only to filter
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%v", q.Table.Object, q.Binary, q.Symbol, cfg.Clauses)
	samples.Lock()
	c, ok := samples.m[key]
	samples.Unlock()
	if ok && time.Since(c.at) < time.Minute {
		return c.s, true, nil
	}
	p, err := kern.Load(cfg)
	if err != nil {
		return Sample{}, false, err
	}
	start := time.Now()
	time.Sleep(window)
	p.Detach() // the counters hold still while they are read
	el := time.Since(start)
	st := p.Stats()
	p.Close()
	s := Sample{Events: st[kern.StEvents], Filtered: len(cfg.Clauses) > 0}
	switch {
	case cfg.Join: // EVENTS: pairs whose entry passed; every entry has a pair
		s.Events = st[kern.StEntries]
		if s.Events > 0 {
			s.EnterSel = float64(st[kern.StEvents]) / float64(s.Events)
			s.Sel = float64(st[kern.StMatched]) / float64(s.Events)
		}
	case s.Events > 0:
		s.Sel = float64(st[kern.StMatched]) / float64(s.Events)
		s.EnterSel = 1
	}
	s.Rate = float64(s.Events) / el.Seconds()
	samples.Lock()
	samples.m[key] = sampleAt{s, time.Now()}
	samples.Unlock()
	return s, false, nil
}

// Choice is the optimizer's outcome.
type Choice struct {
	Plans  []*Physical // in the order tried (cost order)
	Chosen *Physical
	Prog   *kern.Prog
	Sample Sample
	Cached bool
}

// Choose estimates every candidate, then loads them cheapest first and
// keeps the first the verifier accepts. refuse, for tests, makes named
// plans fail as if the verifier had refused them.
func Choose(q *sema.Query, mvsfOnly bool, sample time.Duration, refuse map[string]bool) (*Choice, error) {
	cands := Candidates(q, mvsfOnly)
	ch := &Choice{}
	if !mvsfOnly {
		s, cached, err := SampleHooks(q, sample)
		if err != nil {
			return nil, fmt.Errorf("sample the hooks: %w", err)
		}
		ch.Sample, ch.Cached = s, cached
	}
	for _, p := range cands {
		Estimate(q, p, ch.Sample)
		p.Outcome = "not tried: a cheaper plan loaded"
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].Cost < cands[j].Cost })
	ch.Plans = cands
	var lastErr error
	for _, p := range cands {
		if refuse[p.Name] {
			p.Outcome = "refused by the verifier (forced by test)"
			continue
		}
		prog, err := kern.Load(p.Kernel)
		if err != nil {
			var ve *kern.VerifierError
			if errors.As(err, &ve) {
				p.Outcome = "refused by the verifier: " + firstLine(err.Error())
				lastErr = err
				continue
			}
			p.Outcome = "failed: " + firstLine(err.Error())
			return ch, err
		}
		p.Outcome = "loaded (verifier accepted)"
		ch.Chosen, ch.Prog = p, prog
		return ch, nil
	}
	return ch, fmt.Errorf("no plan loaded: %w", lastErr)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// Explain prints the chosen plan, the alternatives, their estimated costs
// and verifier outcomes.
func (ch *Choice) Explain(w io.Writer, q *sema.Query) {
	src := strings.Join(strings.Fields(q.Src), " ")
	fmt.Fprintf(w, "query: %s\n", src)
	fmt.Fprintf(w, "table: %s (template %s)\n", q.Table.Name, q.Table.Object)
	if len(ch.Plans) == 1 {
		fmt.Fprintf(w, "event rate: not sampled (mvsf_only: one plan)\n")
	} else {
		how := "sampled now"
		if ch.Cached {
			how = "sampled within the last minute"
		}
		fmt.Fprintf(w, "event rate: %.0f/s (%s)\n", ch.Sample.Rate, how)
		switch s := ch.Sample; {
		case s.Selective():
			fmt.Fprintf(w, "selectivity: %.4f of %d sampled events pass the pushed clauses", s.Sel, s.Events)
			if q.Table.Joined {
				fmt.Fprintf(w, " (%.4f pass those checked at entry)", s.EnterSel)
			}
			fmt.Fprintln(w)
		case s.Filtered:
			fmt.Fprintf(w, "selectivity: defaults (the sample saw %d events, fewer than %d)\n", s.Events, minSampleEvents)
		}
	}
	if ch.Chosen != nil {
		fmt.Fprintf(w, "chosen plan: %s\n", ch.Chosen.Name)
		fmt.Fprintf(w, "  kernel: %s\n", strings.Join(ch.Chosen.KernOps, " -> "))
		fmt.Fprintf(w, "  user:   %s\n", strings.Join(ch.Chosen.UserOps, " -> "))
	}
	fmt.Fprintf(w, "plans, cheapest estimate first (CPU per second of tracing):\n")
	for _, p := range ch.Plans {
		mark := " "
		if p == ch.Chosen {
			mark = "*"
		}
		fmt.Fprintf(w, " %s %-24s %10s  %s\n", mark, p.Name, fmtCost(p.Cost), p.Outcome)
	}
}

func fmtCost(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s/s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms/s", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f us/s", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns/s", ns)
}
