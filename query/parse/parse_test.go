package parse

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseFullQuery(t *testing.T) {
	src := "SELECT pid, syscall AS s, MAX(latency_ns) FROM syscalls\nWHERE comm = 'fio' AND nr IN (0, 1) AND NOT ret BETWEEN -5 AND -1 AND comm LIKE 'f%'\nGROUP BY pid, syscall WINDOW 500ms HAVING COUNT(*) > 2 ORDER BY s DESC, pid LIMIT 10;"
	q, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Items) != 3 || q.Items[1].Alias != "s" || q.Items[2].Text != "MAX(latency_ns)" {
		t.Fatalf("items: %+v", q.Items)
	}
	if q.From.Name != "syscalls" || len(q.GroupBy) != 2 || q.Window != 500*time.Millisecond || q.Limit != 10 {
		t.Fatalf("clauses: %+v", q)
	}
	if len(q.OrderBy) != 2 || !q.OrderBy[0].Desc || q.OrderBy[1].Desc {
		t.Fatalf("order: %+v", q.OrderBy)
	}
	w := q.Where.(*Binary)
	if w.Op != "AND" {
		t.Fatalf("where: %T %v", q.Where, w.Op)
	}
	if _, ok := q.Having.(*Binary); !ok {
		t.Fatalf("having %T", q.Having)
	}
}

func TestPrecedence(t *testing.T) {
	q, err := Parse("SELECT 1 + 2 * 3 - 4 % 3 AS x FROM t WHERE a = 1 OR b = 2 AND c = 3")
	if err != nil {
		t.Fatal(err)
	}
	add := q.Items[0].Expr.(*Binary)
	if add.Op != "-" || add.L.(*Binary).Op != "+" || add.L.(*Binary).R.(*Binary).Op != "*" {
		t.Fatalf("arithmetic precedence wrong: %+v", add)
	}
	or := q.Where.(*Binary)
	if or.Op != "OR" || or.R.(*Binary).Op != "AND" {
		t.Fatalf("AND must bind tighter than OR")
	}
}

func TestUprobeSource(t *testing.T) {
	q, err := Parse("SELECT pid FROM uprobe('/usr/bin/x', 'main')")
	if err != nil {
		t.Fatal(err)
	}
	if q.From.Name != "uprobe" || len(q.From.Args) != 2 || q.From.Args[1].V != "main" {
		t.Fatalf("%+v", q.From)
	}
}

func TestErrorsArePositioned(t *testing.T) {
	for _, c := range []struct {
		src       string
		line, col int
		msg       string
	}{
		{"SELECT pid FRM syscalls", 1, 12, "expected FROM"},
		{"SELECT pid\nFROM syscalls\nWHERE pid = 'x", 3, 13, "unterminated"},
		{"SELECT pid FROM syscalls LIMIT -1", 1, 32, "LIMIT"},
		{"SELECT pid FROM syscalls WINDOW 3", 1, 34, "unit"},
		{"SELECT pid FROM syscalls WHERE pid @ 1", 1, 36, "unexpected character"},
		{"SELECT sum(*) FROM x", 1, 12, "only COUNT takes *"},
		{"SELECT pid FROM syscalls extra", 1, 26, "unexpected"},
	} {
		_, err := Parse(c.src)
		var pe *Error
		if !errors.As(err, &pe) {
			t.Fatalf("%q: want *Error, got %v", c.src, err)
		}
		if pe.Line != c.line || pe.Col != c.col || !strings.Contains(pe.Msg, c.msg) {
			t.Errorf("%q: got %d:%d %q, want %d:%d ~%q", c.src, pe.Line, pe.Col, pe.Msg, c.line, c.col, c.msg)
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != 3 || strings.Index(lines[2], "^")-2 != pe.Col-1 {
			t.Errorf("%q: caret misplaced:\n%s", c.src, err)
		}
	}
}
