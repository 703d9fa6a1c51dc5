package exporter

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestPrometheusScrapesQueries runs the exporter with two queries, a real
// Prometheus scraping it, and a workload of known size: a copy of dd under a
// name of its own making exactly 3000 one-byte reads and writes. PromQL
// through Prometheus's HTTP API must return its syscall counts, its latency
// histogram and quantile, and the series bound of the second query.
func TestPrometheusScrapesQueries(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.NeedServers(t)
	comm := fmt.Sprintf("xdd%d", os.Getpid()%100000)
	ddPath, err := exec.LookPath("dd")
	if err != nil {
		t.Fatal(err)
	}
	dd := filepath.Join(t.TempDir(), comm)
	b, _ := os.ReadFile(ddPath)
	if err := os.WriteFile(dd, b, 0o755); err != nil {
		t.Fatal(err)
	}
	win := 300 * time.Millisecond * testenv.TimeScale()
	e, err := New(Config{Listen: "127.0.0.1:0", Window: win, Queries: []Query{
		{Name: "dd", SQL: fmt.Sprintf("SELECT comm, syscall, COUNT(*) AS calls, HIST(latency_ns) AS lat, QUANTILE(latency_ns, 0.5) AS p50 "+
			"FROM syscalls WHERE comm = '%s' GROUP BY comm, syscall", comm)},
		{Name: "few", SQL: "SELECT pid, COUNT(*) AS calls FROM syscalls GROUP BY pid", MaxSeries: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, func(a string) { addrc <- a }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("exporter: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("exporter: %v", err)
	}
	prom := testenv.Prometheus(t, servers.PrometheusOptions{Targets: []string{addr}, ScrapeInterval: 500 * time.Millisecond})

	// Give the queries time to load, then run the workload.
	waitFor(t, prom, `cistern_exporter_windows_total{query="dd"} > 1`, 60*time.Second)
	if out, err := exec.Command(dd, "if=/dev/zero", "of=/dev/null", "bs=1", "count=3000", "status=none").CombinedOutput(); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	for _, sc := range []string{"read", "write"} {
		sel := fmt.Sprintf(`{comm=%q,syscall=%q}`, comm, sc)
		v := waitFor(t, prom, "cistern_query_dd_calls_total"+sel+" >= 3000", 30*time.Second)
		if v > 3010 {
			t.Errorf("%s: %v calls counted, dd made 3000 (and a few of its own)", sc, v)
		}
		c := waitFor(t, prom, "cistern_query_dd_lat_nanoseconds_count"+sel+" >= 3000", 10*time.Second)
		inf := waitFor(t, prom, `cistern_query_dd_lat_nanoseconds_bucket{le="+Inf",comm=`+fmt.Sprintf("%q,syscall=%q}", comm, sc), 10*time.Second)
		if c != inf || c != v {
			t.Errorf("%s: histogram count %v, +Inf bucket %v, calls %v: must be equal", sc, c, inf, v)
		}
		if q := waitFor(t, prom, "histogram_quantile(0.5, cistern_query_dd_lat_nanoseconds_bucket"+sel+")", 10*time.Second); q <= 0 {
			t.Errorf("%s: median from the histogram %v", sc, q)
		}
	}
	// The QUANTILE gauge keeps the value of dd's last window.
	if n := waitFor(t, prom, fmt.Sprintf(`count(cistern_query_dd_p50_nanoseconds{comm=%q,quantile="0.5"} > 0)`, comm), 10*time.Second); n < 2 {
		t.Errorf("p50 gauges for %v syscalls, want read and write at least", n)
	}
	// Every process on the machine makes syscalls: 2 series kept, the rest dropped and counted.
	if v := waitFor(t, prom, `cistern_exporter_series{query="few"}`, 10*time.Second); v != 2 {
		t.Errorf("few: %v series, want 2", v)
	}
	waitFor(t, prom, `cistern_exporter_series_dropped_total{query="few"} > 0`, 10*time.Second)
	if v := waitFor(t, prom, `count(cistern_query_few_calls_total)`, 10*time.Second); v != 2 {
		t.Errorf("few: %v series in Prometheus, want 2", v)
	}
}

// waitFor polls an instant PromQL query until it returns one sample, and
// returns its value.
func waitFor(t *testing.T, p *servers.Prometheus, promql string, d time.Duration) float64 {
	t.Helper()
	var last any
	for deadline := time.Now().Add(d * testenv.TimeScale()); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		s, err := p.Query(promql)
		if err != nil {
			last = err
			continue
		}
		if len(s) == 1 {
			return s[0].Value
		}
		last = s
	}
	t.Fatalf("PromQL %s: no single sample after %v (last answer %v)", promql, d, last)
	return 0
}
