package capture

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cistern-ebpf/cistern/accum"
)

func pgMsg(typ byte, body ...[]byte) []byte {
	var b []byte
	for _, p := range body {
		b = append(b, p...)
	}
	out := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(4+len(b)))
	return append(out, b...)
}

func cstr(s string) []byte { return append([]byte(s), 0) }

func startup() []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b[4:], pgProtocol3)
	b = append(b, cstr("user")...)
	b = append(b, cstr("postgres")...)
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

func TestPostgresParser(t *testing.T) {
	// Fragments of 1, 3 and 7 bytes (messages split across fragments must
	// reassemble from the parser's buffer) and whole exchanges (parsed in
	// place, without buffering).
	for _, split := range []int{1, 3, 7, 1 << 20} {
		t.Run(fmt.Sprint(split), func(t *testing.T) { testPostgresParser(t, split) })
	}
}

func testPostgresParser(t *testing.T, split int) {
	p := newPGConn(7)
	var got []Query
	feed := func(dir accum.Direction, b []byte, ts uint64) {
		// Each call here is its own batch.
		for i := 0; i < len(b); i += split {
			j := min(i+split, len(b))
			ft := fragTimes{first: ts, last: ts, opens: i == 0, closes: j == len(b)}
			got = p.feed(got, dir, b[i:j], ft, 42)
		}
	}
	feed(accum.Write, startup(), 1)
	feed(accum.Read, append(pgMsg('R', []byte{0, 0, 0, 0}), pgMsg('Z', []byte("I"))...), 2)
	// Simple query with rows.
	feed(accum.Write, pgMsg('Q', cstr("SELECT generate_series(1,3)")), 1000)
	feed(accum.Read, append(append(append(append(append(
		pgMsg('T', []byte{0, 1}), pgMsg('D', []byte{0, 1, 0, 0, 0, 1, '1'})...),
		pgMsg('D', []byte{0, 1, 0, 0, 0, 1, '2'})...), pgMsg('D', []byte{0, 1, 0, 0, 0, 1, '3'})...),
		pgMsg('C', cstr("SELECT 3"))...), pgMsg('Z', []byte("I"))...), 6000)
	// Error.
	feed(accum.Write, pgMsg('Q', cstr("SELECT * FROM nope")), 7000)
	feed(accum.Read, append(pgMsg('E', []byte("SERROR\x00C42P01\x00Mrelation \"nope\" does not exist\x00\x00")), pgMsg('Z', []byte("I"))...), 8000)
	// Extended: Parse/Bind/Describe/Execute/Sync.
	feed(accum.Write, append(append(append(append(
		pgMsg('P', cstr("s1"), cstr("INSERT INTO t VALUES ($1)"), []byte{0, 0}),
		pgMsg('B', cstr(""), cstr("s1"), []byte{0, 0, 0, 0, 0, 0})...),
		pgMsg('D', []byte("P"), cstr(""))...), pgMsg('E', cstr(""), []byte{0, 0, 0, 0})...), pgMsg('S')...), 9000)
	feed(accum.Read, append(append(append(append(pgMsg('1'), pgMsg('2')...), pgMsg('n')...),
		pgMsg('C', cstr("INSERT 0 1"))...), pgMsg('Z', []byte("I"))...), 9500)

	want := []Query{
		{Query: "SELECT generate_series(1,3)", Rows: 3, LatencyUS: 5},
		{Query: "SELECT * FROM nope", Error: `ERROR 42P01: relation "nope" does not exist`, LatencyUS: 1},
		{Query: "INSERT INTO t VALUES ($1)", Rows: 1, LatencyUS: 0.5},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d queries %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Query != w.Query || g.Rows != w.Rows || g.Error != w.Error || g.LatencyUS != w.LatencyUS || !g.LatencyExact || g.PID != 42 || g.ConnID != 7 {
			t.Errorf("query %d: got %+v, want %+v", i, g, w)
		}
	}
}
