package sema

import (
	"errors"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/query/parse"
)

func check(src string) (*Query, error) {
	pq, err := parse.Parse(src)
	if err != nil {
		return nil, err
	}
	return Check(pq)
}

func TestValidTypes(t *testing.T) {
	q, err := check("SELECT syscall, COUNT(*) AS n, AVG(latency_ns), HIST(latency_ns) AS h FROM syscalls WHERE ret < 0 GROUP BY syscall ORDER BY n DESC")
	if err != nil {
		t.Fatal(err)
	}
	want := []Type{TStr, TInt, TFloat, THist}
	for i, it := range q.Items {
		if it.Type != want[i] {
			t.Errorf("item %s: %v, want %v", it.Name, it.Type, want[i])
		}
	}
	if q.Items[2].Name != "AVG(latency_ns)" || !q.Grouped || len(q.Aggs) != 3 {
		t.Fatalf("%+v", q)
	}
}

func TestCheckErrors(t *testing.T) {
	for _, c := range []struct{ src, at, msg string }{
		{"SELECT x FROM syscalls", "x FROM", "unknown column x"},
		{"SELECT pid FROM nosuch", "nosuch", "unknown table"},
		{"SELECT pid FROM syscalls WHERE pid = 'a'", "'a'", "type mismatch"},
		{"SELECT pid FROM syscalls WHERE COUNT(*) > 1", "COUNT", "not allowed here"},
		{"SELECT pid, COUNT(*) FROM syscalls", "pid,", "GROUP BY"},
		{"SELECT SUM(comm) FROM syscalls", "comm)", "needs a number"},
		{"SELECT pid FROM syscalls WINDOW 1s", "WINDOW", "WINDOW needs"},
		{"SELECT pid FROM syscalls HAVING pid > 0", "pid > 0", "HAVING needs"},
		{"SELECT comm FROM syscalls WHERE comm LIKE 'a%b'", "'a%b'", "prefix"},
		{"SELECT pid FROM uprobe('/nonexistent', 'x')", "'/nonexistent'", "no such binary"},
		{"SELECT pid FROM uprobe('libc', 'not_a_symbol_at_all')", "'not_a_symbol", "no function symbol"},
		{"SELECT QUANTILE(ret, 1.5) FROM syscalls", "1.5", "between 0 and 1"},
		{"SELECT pid AS a, tid AS a FROM syscalls", "tid", "two output columns"},
	} {
		_, err := check(c.src)
		var pe *parse.Error
		if !errors.As(err, &pe) {
			t.Fatalf("%q: want *parse.Error, got %v", c.src, err)
		}
		if want := strings.Index(c.src, c.at) + 1; pe.Col != want || !strings.Contains(pe.Msg, c.msg) {
			t.Errorf("%q: got col %d %q, want col %d ~%q", c.src, pe.Col, pe.Msg, want, c.msg)
		}
	}
}

func TestStrSlotsPackLikeTheKernel(t *testing.T) {
	c := Tables["syscalls"].Col("comm")
	vals, masks, ok := c.StrSlots("abcdefghij", false)
	if !ok || len(vals) != 2 || masks[0] != ^uint64(0) || masks[1] != 0xffffff {
		t.Fatalf("%x %x %v", vals, masks, ok)
	}
	r := make([]uint64, 32)
	r[4], r[5] = vals[0], vals[1]
	if got := c.StrOf(r); got != "abcdefghij" {
		t.Fatalf("round trip %q", got)
	}
	if _, _, ok := c.StrSlots(strings.Repeat("x", 16), false); ok {
		t.Fatal("a 16-byte comm cannot match (15 bytes + NUL)")
	}
}

func TestSyscallNames(t *testing.T) {
	c := Tables["syscalls"].Col("syscall")
	if v, ok := c.EnumValue("read"); !ok || v != 0 {
		t.Fatal("read is 0 on x86_64")
	}
	if v, ok := c.EnumValue("openat"); !ok || v != 257 {
		t.Fatal("openat is 257 on x86_64")
	}
}
