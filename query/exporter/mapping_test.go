package exporter

import (
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/query"
)

func TestColumnsMapping(t *testing.T) {
	q, err := query.Compile("SELECT comm, syscall AS le, COUNT(*) AS calls, SUM(ret) AS bytes, HIST(latency_ns) AS lat, " +
		"QUANTILE(latency_ns, 0.99) AS p99, AVG(latency_ns) AS avg_ns, MAX(latency_ns) - MIN(latency_ns) AS spread " +
		"FROM syscalls GROUP BY comm, syscall")
	if err != nil {
		t.Fatal(err)
	}
	cols, err := columns("t", q, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		k    kind
		name string
	}{
		{kLabel, "comm"}, {kLabel, "key_le"}, {kCounter, "cistern_query_t_calls_total"},
		{kCounter, "cistern_query_t_bytes_total"}, {kHistogram, "cistern_query_t_lat_nanoseconds"},
		{kQuantile, "cistern_query_t_p99_nanoseconds"}, {kGauge, "cistern_query_t_avg_ns_nanoseconds"},
		{kGauge, "cistern_query_t_spread"},
	}
	if len(cols) != len(want) {
		t.Fatalf("%d columns: %+v", len(cols), cols)
	}
	for i, w := range want {
		if cols[i].kind != w.k || cols[i].name != w.name {
			t.Errorf("column %d: %v %q, want %v %q", i, cols[i].kind, cols[i].name, w.k, w.name)
		}
	}
	if cols[5].quantile != "0.99" {
		t.Errorf("quantile label %q", cols[5].quantile)
	}
	// Not cumulative: COUNT is the last window's gauge.
	cols, _ = columns("t", q, false)
	if cols[2].kind != kGauge || cols[2].name != "cistern_query_t_calls" {
		t.Errorf("non-cumulative COUNT: %+v", cols[2])
	}
	// Raw rows are no metrics.
	raw, _ := query.Compile("SELECT pid FROM syscalls")
	if _, err := columns("r", raw, true); err == nil || !strings.Contains(err.Error(), "aggregates") {
		t.Errorf("ungrouped query: %v", err)
	}
}

// Rows past max_series are dropped and counted; bad lines are counted.
func TestSeriesBound(t *testing.T) {
	q, _ := query.Compile("SELECT pid, COUNT(*) AS n FROM syscalls GROUP BY pid")
	cols, _ := columns("b", q, true)
	s := newState(Query{Name: "b", MaxSeries: 2}, cols)
	for _, l := range []string{`{"pid":1,"n":5}`, `{"pid":2,"n":1}`, `{"pid":3,"n":7}`, `not json`} {
		s.Write([]byte(l[:len(l)/2]))
		s.Write([]byte(l[len(l)/2:] + "\n"))
	}
	s.window()
	s.Write([]byte(`{"pid":1,"n":2}` + "\n"))
	s.window()
	if len(s.series) != 2 || s.dropped != 1 || s.bad != 1 {
		t.Fatalf("series %d dropped %d bad %d", len(s.series), s.dropped, s.bad)
	}
	if got := s.series["1"].counters[1]; got != 7 {
		t.Fatalf("pid 1 total %v, want 7 (5 + 2 over two windows)", got)
	}
}
