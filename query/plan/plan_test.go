package plan

import (
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/query/kern"
	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/sema"
)

func compile(t *testing.T, src string) *sema.Query {
	t.Helper()
	pq, err := parse.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	q, err := sema.Check(pq)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func names(ps []*Physical) string {
	var n []string
	for _, p := range ps {
		n = append(n, p.Name)
	}
	return strings.Join(n, ",")
}

func TestCandidatesFromMVSFToAggregation(t *testing.T) {
	q := compile(t, "SELECT pid, syscall, MAX(latency_ns) FROM syscalls WHERE comm = 'fio' AND syscall IN ('read', 'pread64') GROUP BY pid, syscall WINDOW 1s")
	ps := Candidates(q, false)
	if got := names(ps); got != "mvsf,join,join+project,join+filter,join+filter+project,join+filter+agg" {
		t.Fatalf("candidates %s", got)
	}
	agg := ps[len(ps)-1]
	k := agg.Kernel
	if k.Emit != kern.EmitAgg || !k.Join || len(k.Keys) != 2 || k.Keys[0] != 1 || k.Keys[1] != 6 || k.AggSlot != 15 || agg.Residual != nil {
		t.Fatalf("agg plan %+v", k)
	}
	if len(k.Clauses) != 2 || k.Clauses[0].Slot != 4 || k.Clauses[0].Mask != 0xffffffff || !k.Clauses[0].Enter {
		t.Fatalf("comm clause %+v", k.Clauses)
	}
	if c := k.Clauses[1]; c.Op != kern.OpEQ || len(c.Vals) != 2 || c.Vals[0] != 0 || c.Vals[1] != 17 {
		t.Fatalf("syscall IN clause %+v", c)
	}
	if !k.NeedComm || k.NeedCgroup {
		t.Fatalf("helpers: comm %v cgroup %v", k.NeedComm, k.NeedCgroup)
	}
	if mv := Candidates(q, true); len(mv) != 1 || mv[0].Kernel.Emit != kern.EmitFull || mv[0].Kernel.Join || mv[0].Residual == nil {
		t.Fatalf("mvsf_only: %+v", mv)
	}
}

func TestWhatStaysInUserSpace(t *testing.T) {
	q := compile(t, "SELECT pid, QUANTILE(latency_ns, 0.9) FROM syscalls WHERE pid % 2 = 0 OR ret < 0 GROUP BY pid")
	a := analyse(q)
	if len(a.push) != 0 || len(a.residual) != 1 || a.aggOK {
		t.Fatalf("push %d residual %d aggOK %v (%s)", len(a.push), len(a.residual), a.aggOK, a.aggWhy)
	}
	q = compile(t, "SELECT comm, SUM(bytes), MAX(latency_ns) FROM block_io GROUP BY comm")
	if a := analyse(q); a.aggOK || !strings.Contains(a.aggWhy, "different columns") {
		t.Fatalf("aggregates over two columns pushed: %v %s", a.aggOK, a.aggWhy)
	}
	q = compile(t, "SELECT filename, COUNT(*) FROM process_exec GROUP BY filename")
	if a := analyse(q); a.aggOK {
		t.Fatal("an 8-slot key cannot be a kernel key")
	}
}

func TestCostsOrderPushdownFirst(t *testing.T) {
	q := compile(t, "SELECT pid, MAX(latency_ns) FROM syscalls WHERE comm = 'fio' GROUP BY pid")
	ps := Candidates(q, false)
	for _, p := range ps {
		Estimate(q, p, Sample{Rate: 1e6})
	}
	var mvsf, agg *Physical
	for _, p := range ps {
		switch p.Name {
		case "mvsf":
			mvsf = p
		case "join+filter+agg":
			agg = p
		}
	}
	if agg == nil || mvsf == nil || agg.Cost*5 > mvsf.Cost {
		t.Fatalf("aggregation in the kernel should be far cheaper than MVSF: %v vs %v", agg, mvsf)
	}
}

func TestEntryTimeIsNotFilteredAtEntry(t *testing.T) {
	q := compile(t, "SELECT pid FROM syscalls WHERE enter_ns > 5 AND pid = 3")
	a := analyse(q)
	if len(a.push) != 2 || a.push[0].clauses[0].Enter || !a.push[1].clauses[0].Enter {
		t.Fatalf("enter_ns must be checked after the clock is read: %+v", a.push)
	}
}
