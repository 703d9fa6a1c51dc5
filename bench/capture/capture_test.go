package capturebench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestCaptureBenchRuns drives a miniature capture bench end to end and checks
// what it reports (not how fast: performance lives in `cistern bench capture`).
func TestCaptureBenchRuns(t *testing.T) {
	testenv.RequireRoot(t)
	rep, err := Run(context.Background(), Options{
		Duration: time.Second, Rounds: 2, Modes: []string{"untraced", "naive", "accumulated"}, Port: 54341,
	})
	testenv.NotInstalled(t, err)
	if err != nil {
		t.Fatal(err)
	}
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
	rep, err := Run(context.Background(), Options{
		Duration: 2 * time.Second, Modes: []string{"sysbench_accumulated_4m"}, Port: 54343,
	})
	testenv.NotInstalled(t, err)
	if err != nil {
		t.Fatal(err)
	}
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
	a, ok := doc.Modes["sysbench_accumulated_4m"]
	if !ok {
		testenv.Missing(t, "sysbench or MariaDB ("+string(data)+")", "apt-get install sysbench mariadb-server (or sudo make deps)")
	}
	if a["queries_sent"] <= 0 || (a["lost_events"] == 0 && a["queries_captured"] != a["queries_sent"]) {
		t.Errorf("captured %v of %v executions, %v events lost: %v", a["queries_captured"], a["queries_sent"], a["lost_events"], a)
	}
}

// TestCaptureBenchChurn runs the churn mode (160 short TLS connections,
// answers up to 1 MiB, capture defaults) and checks it is reported whole:
// every query issued and captured on both sides, nothing lost.
func TestCaptureBenchChurn(t *testing.T) {
	testenv.RequireRoot(t)
	rep, err := Run(context.Background(), Options{Modes: []string{"churn"}, Rounds: 1, Port: 54355})
	testenv.NotInstalled(t, err)
	if err != nil {
		t.Fatal(err)
	}
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
