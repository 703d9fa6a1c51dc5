package capture

import (
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/accum"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestRawExchanges(t *testing.T) {
	r := newRawConn(7)
	ft := fragTimes{first: 100, last: 100, opens: true, closes: true}
	var out []Query
	out = r.feed(out, accum.Direction(1), []byte("GET /a\r\n"), ft, 3)
	out = r.feed(out, accum.Direction(1), []byte("\x00\x01"), ft, 3) // more of the same request
	ft.first, ft.last = 150, 150
	out = r.feed(out, accum.Direction(0), []byte("hello"), ft, 3)
	out = r.feed(out, accum.Direction(0), []byte("!!"), ft, 3)
	if len(out) != 0 {
		t.Fatalf("exchange reported before it ended: %+v", out)
	}
	out = r.feed(out, accum.Direction(1), []byte("GET /b"), ft, 3) // ends the first
	out = r.close(out)                                             // ends the second (unanswered)
	if len(out) != 2 {
		t.Fatalf("got %d exchanges, want 2: %+v", len(out), out)
	}
	if q := out[0]; q.Query != `GET /a\x0d\x0a\x00\x01` || q.Rows != 7 || q.LatencyUS != 0.05 || q.Protocol != "raw" {
		t.Errorf("first exchange: %+v", q)
	}
	if q := out[1]; q.Query != "GET /b" || q.Rows != 0 {
		t.Errorf("second exchange: %+v", q)
	}
	long := r.feed(nil, accum.Direction(1), make([]byte, 4*rawPreview), ft, 3)
	long = r.close(long)
	if len(long) != 1 || len(long[0].Query) != 4*rawPreview { // 256 bytes, each as \x00
		t.Errorf("preview not capped at %d bytes: %d chars", rawPreview, len(long[0].Query))
	}
}

// TestCaptureRawPsql captures psql's plaintext exchanges without parsing
// them: every statement shows up in the preview of one exchange, answered.
func TestCaptureRawPsql(t *testing.T) {
	testenv.RequireRoot(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54349})
	issued := []string{"SELECT 1 AS raw_one;", "SELECT generate_series(1, 50) AS raw_series;"}
	run, err := CapturePsql(pg.Bin("psql"), "sslmode=disable host=127.0.0.1 port=54349 user=postgres dbname=postgres",
		issued, Options{Transport: TransportPlain, Protocol: "raw"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range issued {
		found := false
		for _, q := range run.Queries {
			if strings.Contains(q.Query, s) {
				found = true
				if q.Rows == 0 {
					t.Errorf("exchange of %q has no answer: %+v", s, q)
				}
			}
		}
		if !found {
			t.Errorf("%q is in no exchange: %+v", s, run.Queries)
		}
	}
	if run.Stats.LostRecords != 0 {
		t.Errorf("channel lost records: %+v", run.Stats)
	}
}
