package capturebench

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestCaptureBenchRuns drives a miniature capture bench end to end and checks
// what it reports (not how fast: performance lives in `cistern bench capture`).
// With and without --hold-new (the accumulated mode's capture).
func TestCaptureBenchRuns(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Exclusive(t, testenv.Traffic) // a loopback/veth flood: not beside another package's flood or --all capture
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) { checkBenchRuns(t, hold) })
	}
}

func checkBenchRuns(t *testing.T, hold bool) {
	// pgbench -T: an emulated kernel-matrix guest needs more than a second
	// for its TLS connections alone.
	rep, err := Run(context.Background(), Options{
		Duration: time.Second * testenv.TimeScale(), Rounds: 2, Modes: []string{"untraced", "naive", "accumulated"}, Port: 54341, HoldNew: hold,
	})
	testenv.NotInstalled(t, err)
	if err != nil {
		t.Fatal(err)
	}
	doc := struct{ Modes map[string]map[string]float64 }{modesOf(t, rep)}
	if doc.Modes["untraced"]["queries_sent"] <= 0 {
		t.Errorf("untraced: %v", doc.Modes["untraced"])
	}
	for _, m := range []string{"naive", "accumulated"} {
		row := doc.Modes[m]
		for _, k := range []string{"queries_sent", "queries_captured", "lost_events", "lost_bytes",
			"ring_bytes_per_payload_byte", "events_per_sec", "agent_cpu_pct", "probe_effect_pct"} {
			if _, ok := row[k]; !ok {
				t.Errorf("modes.%s has no %s", m, k)
			}
		}
		if row["queries_sent"] <= 0 || row["queries_captured"] <= 0 {
			t.Errorf("%s: %v", m, row)
		}
	}
	if med, lo, _, ok := rep.RatioSpread("accumulated_vs_naive_agent_cpu_per_query"); !ok || !(lo > 0) || !(med > 0) {
		t.Errorf("accumulated/naive agent CPU per query: %v (min %v, recorded %v)", med, lo, ok)
	}
	a := doc.Modes["accumulated"]
	if a["lost_events"] == 0 && a["queries_captured"] != a["queries_sent"] {
		t.Errorf("accumulated captured %v of %v queries without loss", a["queries_captured"], a["queries_sent"])
	}
	if r := doc.Modes["naive"]["ring_bytes_per_payload_byte"]; r < 10 {
		t.Errorf("naive ring bytes per payload byte %v: a 1 KiB record per small fragment should be >= 10", r)
	}
}

// TestCaptureBenchSysbench runs the MariaDB variant briefly: sysbench's
// prepared statements (COM_STMT_PREPARE once, COM_STMT_EXECUTE per query)
// over TLS must all be captured with their text, or the loss be counted.
func TestCaptureBenchSysbench(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Exclusive(t, testenv.Traffic) // a loopback/veth flood: not beside another package's flood or --all capture
	rep, err := Run(context.Background(), Options{
		Duration: 2 * time.Second, Modes: []string{"sysbench_accumulated_4m"}, Port: 54343,
	})
	testenv.NotInstalled(t, err)
	if err != nil {
		t.Fatal(err)
	}
	doc := struct{ Modes map[string]map[string]float64 }{modesOf(t, rep)}
	a, ok := doc.Modes["sysbench_accumulated_4m"]
	if !ok {
		testenv.Missing(t, fmt.Sprintf("sysbench or MariaDB (modes reported: %v)", doc.Modes), "apt-get install sysbench mariadb-server (or sudo make deps)")
	}
	if a["queries_sent"] <= 0 || (a["lost_events"] == 0 && a["queries_captured"] != a["queries_sent"]) {
		t.Errorf("captured %v of %v executions, %v events lost: %v", a["queries_captured"], a["queries_sent"], a["lost_events"], a)
	}
}

// TestCaptureBenchChurn runs the churn mode (160 short TLS connections,
// answers up to 1 MiB, capture defaults) and checks it is reported whole:
// every query issued and captured on both sides, nothing lost.
// With and without --hold-new (each psql is a new process of the cgroup).
func TestCaptureBenchChurn(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Exclusive(t, testenv.Traffic) // a loopback/veth flood: not beside another package's flood or --all capture
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) { checkBenchChurn(t, hold) })
	}
}

func checkBenchChurn(t *testing.T, hold bool) {
	rep, err := Run(context.Background(), Options{Modes: []string{"churn"}, Rounds: 1, Port: 54355, HoldNew: hold})
	testenv.NotInstalled(t, err)
	if err != nil {
		t.Fatal(err)
	}
	doc := struct{ Modes map[string]map[string]float64 }{modesOf(t, rep)}
	c := doc.Modes["churn"]
	t.Logf("churn: %v", c)
	if c["queries_issued"] != churnConns {
		t.Fatalf("issued %v queries, want %d", c["queries_issued"], churnConns)
	}
	if c["queries_captured"] != c["queries_issued"] || c["lost_events"] != 0 {
		t.Errorf("captured %v of %v, lost %v events", c["queries_captured"], c["queries_issued"], c["lost_events"])
	}
	if v, ok := c["queries_captured_client"]; ok && v != c["queries_issued"] {
		t.Errorf("client side: captured %v of %v", v, c["queries_issued"])
	}
}

// TestCaptureBenchAttach runs the attach mode briefly: every exec of a new
// Go program or libssl copy is attached (a latency per exec), and the
// figures are reported.
func TestCaptureBenchAttach(t *testing.T) {
	testenv.RequireRoot(t)
	rep, err := Run(context.Background(), Options{Modes: []string{"attach"}, Rounds: 1, AttachExecs: 20, Port: 54356})
	if err != nil {
		t.Fatal(err)
	}
	doc := struct{ Modes map[string]map[string]float64 }{modesOf(t, rep)}
	a := doc.Modes["attach"]
	t.Logf("attach: %v", a)
	if a["go_execs"] != 20 || a["openssl_execs"] != 20 {
		t.Errorf("attached %v Go and %v openssl execs, want 20 each", a["go_execs"], a["openssl_execs"])
	}
	for _, k := range []string{"go_attach_ms_p50_all", "go_attach_ms_p99_all", "openssl_attach_ms_p50_all",
		"openssl_attach_ms_p99_all", "go_start_ms_untraced", "go_start_ms_hold", "openssl_hold_added_ms", "agent_cpu_pct"} {
		if _, ok := a[k]; !ok {
			t.Errorf("attach has no %s", k)
		}
	}
	if a["go_attach_ms_p50_all"] <= 0 || a["go_attach_ms_p99_all"] < a["go_attach_ms_p50_all"] {
		t.Errorf("Go latencies: median %v p99 %v", a["go_attach_ms_p50_all"], a["go_attach_ms_p99_all"])
	}
	// Held past --hold-max: counted, and a figure of the load (not checked).
	t.Logf("%v processes held past --hold-max", a["hold_timeouts"])
}

// modesOf is the report's per-mode figures, as its JSON has them.
func modesOf(t *testing.T, rep any) map[string]map[string]float64 {
	t.Helper()
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Modes map[string]map[string]float64 `json:"modes"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Modes
}
