package exec

import (
	"bytes"
	"encoding/binary"
	"encoding/csv"
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

func sysRec(pid, nr, lat uint64, comm string) *Rec {
	var r Rec
	r[1], r[2], r[6], r[15] = pid, pid, nr, lat
	var b [16]byte
	copy(b[:], comm)
	r[4], r[5] = binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])
	return &r
}

func TestGroupOrderLimitHaving(t *testing.T) {
	q := compile(t, "SELECT syscall, COUNT(*) AS n, MAX(latency_ns) AS mx, AVG(latency_ns) AS av, QUANTILE(latency_ns, 0.5) AS med, COUNT(DISTINCT pid) AS pids FROM syscalls GROUP BY syscall HAVING COUNT(*) > 1 ORDER BY n DESC LIMIT 2")
	var out bytes.Buffer
	e := New(q, nil, &out, "csv")
	for i := uint64(1); i <= 5; i++ {
		e.Row(sysRec(i%2+1, 0, i*10, "a")) // read x5, latencies 10..50
	}
	e.Row(sysRec(1, 1, 7, "a")) // write x1: dropped by HAVING
	e.Row(sysRec(1, 3, 7, "a"))
	e.Row(sysRec(1, 3, 9, "a")) // close x2
	if err := e.Finish(0); err != nil {
		t.Fatal(err)
	}
	want := "syscall,n,mx,av,med,pids\nread,5,50,30,30,2\nclose,2,9,8,7,1\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestResidualWhereAndNulls(t *testing.T) {
	q := compile(t, "SELECT pid, latency_ns / (pid - 1) AS d, comm FROM syscalls WHERE comm LIKE 'fi%' AND latency_ns BETWEEN 5 AND 100")
	var out bytes.Buffer
	e := New(q, q.Where, &out, "json")
	e.Row(sysRec(1, 0, 50, "fio"))
	e.Row(sysRec(3, 0, 50, "fio"))
	e.Row(sysRec(3, 0, 500, "fio"))
	e.Row(sysRec(3, 0, 50, "bash"))
	e.Flush()
	want := `{"pid":1,"d":null,"comm":"fio"}` + "\n" + `{"pid":3,"d":25,"comm":"fio"}` + "\n"
	if out.String() != want || e.Matched() != 2 {
		t.Fatalf("got %q (matched %d)", out.String(), e.Matched())
	}
}

func TestUserJoinOfHalves(t *testing.T) {
	q := compile(t, "SELECT syscall, ret, latency_ns FROM syscalls")
	var out bytes.Buffer
	e := New(q, nil, &out, "csv")
	enter := make([]uint64, 17)
	enter[0], enter[2], enter[6], enter[kern.HalfKey] = 1000, 42, 1, 42
	exit := make([]uint64, 17)
	exit[13], exit[14], exit[kern.HalfKey] = 5, 1700, 42
	e.Record(kern.KindExit, exit, nil) // an exit without entry is ignored
	e.Record(kern.KindEnter, enter, nil)
	e.Record(kern.KindExit, exit, nil)
	e.Flush()
	if out.String() != "syscall,ret,latency_ns\nwrite,5,700\n" {
		t.Fatalf("got %q", out.String())
	}
}

func TestKernelPartialsMerge(t *testing.T) {
	q := compile(t, "SELECT pid, COUNT(*) AS n, MIN(latency_ns) AS lo, MAX(latency_ns) AS hi, SUM(latency_ns) AS s, HIST(latency_ns) AS h FROM syscalls GROUP BY pid WINDOW 1s")
	var out bytes.Buffer
	e := New(q, nil, &out, "json")
	var h [kern.NHist]uint64
	h[3] = 2
	p := kern.Partial{K: [kern.MaxKey]uint64{77}, Per: []kern.AggVal{{Count: 2, Sum: 10, Min: 4, Max: 6, Hist: h}, {}, {Count: 1, Sum: 1, Min: 1, Max: 1}}}
	e.Partial([]int{1}, p)
	if err := e.Window(123); err != nil {
		t.Fatal(err)
	}
	want := `{"window_end_ns":123,"pid":77,"n":3,"lo":1,"hi":6,"s":11,"h":[{"min":4,"max":7,"count":2}]}`
	if strings.TrimSpace(out.String()) != want {
		t.Fatalf("got  %s\nwant %s", out.String(), want)
	}
}

func TestTableOutputAndEmptyAggregate(t *testing.T) {
	q := compile(t, "SELECT COUNT(*) AS n, MAX(ret) AS m FROM syscalls")
	var out bytes.Buffer
	e := New(q, nil, &out, "table")
	if err := e.Finish(0); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || strings.Fields(lines[1])[0] != "0" || strings.Fields(lines[1])[1] != "NULL" {
		t.Fatalf("got %q", out.String())
	}
}

// TestCSVFieldsMatchEncodingCSV checks the in-place CSV formatting against
// encoding/csv on fields that need quoting and fields that do not.
func TestCSVFieldsMatchEncodingCSV(t *testing.T) {
	vals := []Value{intV(-42), floatV(1.5), {k: kStr, s: "plain"}, {k: kStr, s: `a,"b"`},
		{k: kStr, s: " lead"}, {k: kStr, s: "two\nlines"}, {k: kStr, s: ""}, {k: kStr, s: `\.`}, {}, boolV(true)}
	var want bytes.Buffer
	cw := csv.NewWriter(&want)
	rec := make([]string, len(vals))
	for i, v := range vals {
		rec[i] = v.text()
	}
	if err := cw.Write(rec); err != nil {
		t.Fatal(err)
	}
	cw.Flush()
	var got []byte
	for i, v := range vals {
		if i > 0 {
			got = append(got, ',')
		}
		got = v.appendCSV(got)
	}
	if string(got)+"\n" != want.String() {
		t.Fatalf("got %q, encoding/csv %q", got, want.String())
	}
}
