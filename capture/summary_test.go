package capture

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSummary: rows per side, user, client and fingerprint (statements
// differing in their literals share one), with count, errors, rows and
// latency quantiles; past MaxSeries, queries are counted as dropped, and the
// Prometheus series follow the rows.
func TestSummary(t *testing.T) {
	s := NewSummary(2)
	var san Sanitizer
	add := func(user, comm, text string, lat float64, rows int64, errText string) {
		q := Query{Side: SideClient, User: user, Comm: comm, Protocol: "postgres", Query: text, LatencyUS: lat, Rows: rows, Error: errText}
		q.Fingerprint = san.Fingerprint(q.Protocol, q.Query)
		s.Add(&q)
	}
	for i := 1; i <= 100; i++ {
		add("app", "node", "SELECT * FROM t WHERE id = "+strings.Repeat("7", i%5+1), float64(i), 1, "")
	}
	add("app", "node", "SELECT * FROM t WHERE id = 'x'", 1000, 0, "ERROR 22P02: invalid input")
	add("admin", "psql", "DELETE FROM t", 5, 3, "")
	add("other", "psql", "SELECT 1", 5, 1, "") // a third row: past MaxSeries 2
	s.Add(&Query{Unread: true, Side: SideClient})
	rows, dropped := s.Rows()
	if len(rows) != 2 || dropped != 1 {
		t.Fatalf("rows %+v dropped %d; want 2 rows, 1 dropped", rows, dropped)
	}
	r := rows[0]
	if r.User != "app" || r.Client != "node" || r.Count != 101 || r.Errors != 1 || r.Rows != 100 ||
		r.Query != "SELECT * FROM t WHERE id = ?" {
		t.Errorf("first row %+v", r)
	}
	if r.P50US < 49 || r.P50US > 53 || r.P99US < 99 || r.P99US > 1000 {
		t.Errorf("p50 %.1f p99 %.1f, want about 51 and 100", r.P50US, r.P99US)
	}
	if rows[1].User != "admin" || rows[1].Count != 1 || rows[1].Rows != 3 {
		t.Errorf("second row %+v", rows[1])
	}
	var b strings.Builder
	if err := s.Write(&b, FormatTable); err != nil || !strings.Contains(b.String(), "SELECT * FROM t WHERE id = ?") ||
		strings.Contains(b.String(), "'x'") || !strings.Contains(b.String(), "1 queries past the 2 rows") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
		if mf.GetName() == "cistern_capture_summary_dropped_total" && mf.GetMetric()[0].GetCounter().GetValue() != 1 {
			t.Errorf("dropped %v", mf.GetMetric()[0])
		}
	}
	for _, n := range []string{"cistern_capture_summary_queries_total", "cistern_capture_summary_errors_total",
		"cistern_capture_summary_rows_total", "cistern_capture_summary_latency_seconds"} {
		if got[n] != 2 {
			t.Errorf("%s: %d series, want 2 (%v)", n, got[n], got)
		}
	}
}
