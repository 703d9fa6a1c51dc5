package otlp

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestAttributes(t *testing.T) {
	q := capture.Query{Protocol: "postgres", Query: "select * FROM t;", Rows: 3, Database: "shop", User: "app",
		Error: `ERROR 42P01: relation "t" does not exist`, Side: "server", Local: "10.0.0.1:5432", Remote: "10.0.0.2:40000"}
	got := map[string]any{}
	for _, a := range Attributes(q) {
		got[string(a.Key)] = a.Value.AsInterface()
	}
	for k, v := range map[string]any{"db.system.name": "postgresql", "db.query.text": "select * FROM t;", "db.operation.name": "SELECT",
		"db.namespace": "shop", "db.response.returned_rows": int64(3), "error.type": "42P01",
		"server.address": "10.0.0.1", "server.port": int64(5432), "client.address": "10.0.0.2", "client.port": int64(40000)} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if got["cistern.query.fingerprint"] != capture.FingerprintOf("postgres", "select * FROM t;").String() {
		t.Errorf("cistern.query.fingerprint %v", got["cistern.query.fingerprint"])
	}
	if kind(q).String() != "server" {
		t.Errorf("kind %v for the server side", kind(q))
	}
	if _, err := New(Options{Endpoint: "x:1", Protocol: "udp"}); err == nil {
		t.Error("protocol udp accepted")
	}
	if _, err := New(Options{Endpoint: "x:1", QueryText: "verbatim"}); err == nil {
		t.Error("query text verbatim accepted")
	}
}

// TestSpansReachJaeger captures psql's queries against a real PostgreSQL
// and sends them, over OTLP gRPC and HTTP, to a real Jaeger v2: each query
// is one span with its attributes, its text sanitized: the passwords of
// CREATE ROLE and ALTER ROLE, a WHERE clause's literal and an error's
// message never reach Jaeger, unless QueryText is raw. Then Jaeger stops:
// spans sent after that are counted as failed or dropped, and Send never
// waits.
func TestSpansReachJaeger(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.NeedServers(t)
	j, err := servers.StartJaeger()
	if err != nil {
		testenv.NotInstalled(t, err)
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			j.Stop()
		}
	}()
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54369})
	mark := fmt.Sprintf("otlp%d", time.Now().UnixNano()%1e9)
	issued := []string{
		fmt.Sprintf("SELECT 1 AS %s_a;", mark),
		fmt.Sprintf("SELECT generate_series(1, 4) AS %s_b;", mark),
		fmt.Sprintf("SELECT * FROM %s_missing;", mark),
		fmt.Sprintf("CREATE ROLE %s_r LOGIN PASSWORD 'pw1-%s';", mark, mark),
		fmt.Sprintf("ALTER ROLE %s_r PASSWORD 'pw2-%s';", mark, mark),
		fmt.Sprintf("SELECT relname AS %s_c FROM pg_class WHERE relname = 'lit-%s';", mark, mark),
		fmt.Sprintf("SELECT relname AS %s_c FROM pg_class WHERE relname = 'pg_class';", mark),
		fmt.Sprintf("DROP ROLE %s_r;", mark),
	}
	run, err := capture.CapturePsql(pg.Bin("psql"), fmt.Sprintf("sslmode=disable host=127.0.0.1 port=%d user=postgres dbname=postgres", pg.Opt.Port),
		issued, capture.Options{Transport: capture.TransportPlain})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Queries) != len(issued) {
		t.Fatalf("captured %d queries, want %d: %+v", len(run.Queries), len(issued), run.Queries)
	}
	// Every record has the fingerprint of its sanitized text: the two
	// pg_class lookups, different literals, share one.
	for i, q := range run.Queries {
		if q.Query != issued[i] || q.Fingerprint != capture.FingerprintOf("postgres", issued[i]) {
			t.Errorf("record %d: %q fingerprint %v, want %q's %v", i, q.Query, q.Fingerprint, issued[i], capture.FingerprintOf("postgres", issued[i]))
		}
	}
	if a, b := run.Queries[5].Fingerprint, run.Queries[6].Fingerprint; a != b || a == 0 {
		t.Errorf("WHERE relname = 'lit-…' %v and = 'pg_class' %v: want one fingerprint", a, b)
	}
	// One set of spans per protocol, sanitized (the default), and one set
	// sent raw: identifiers (and so the secrets) carry the set's name.
	// By the text Jaeger should hold: the two pg_class lookups have one.
	want := map[string][]capture.Query{}
	var hidden, shown []string
	for _, set := range []string{"grpc", "http", "raw"} {
		proto, port, text := set, map[string]string{"grpc": "4317", "http": "4318"}[set], ""
		if set == "raw" {
			proto, port, text = "grpc", "4317", TextRaw
		}
		e, err := New(Options{Endpoint: "127.0.0.1:" + port, Protocol: proto, QueryText: text})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range run.Queries {
			q.Query = strings.ReplaceAll(q.Query, mark, mark+set)
			q.Error = strings.ReplaceAll(q.Error, mark, mark+set)
			q.Fingerprint = capture.FingerprintOf("postgres", q.Query)
			e.Send(q)
			text := q.Query
			if set != "raw" {
				text = capture.Sanitize("postgres", q.Query)
			}
			want[text] = append(want[text], q)
		}
		st := e.Close(10 * time.Second)
		if st.Exported != uint64(len(issued)) || st.Dropped != 0 || st.Failed != 0 {
			t.Fatalf("%s: %+v", set, st)
		}
		secrets := []string{"pw1-" + mark + set, "pw2-" + mark + set, "lit-" + mark + set, mark + set + `_missing\"` /* the error message, quoted in JSON */}
		if set == "raw" {
			shown = secrets
		} else {
			hidden = append(hidden, secrets...)
		}
	}
	var spans []servers.Span
	for deadline := time.Now().Add(20 * time.Second * testenv.TimeScale()); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		if spans, err = j.Spans("cistern-capture"); err == nil && len(spans) >= 3*len(issued) {
			break
		}
	}
	seen := map[string]int{}
	for _, s := range spans {
		text, _ := s.Tags["db.query.text"].(string)
		qs := want[text]
		if len(qs) == 0 {
			continue
		}
		// The query of this span: the one with its rows and duration.
		q := qs[0]
		for _, c := range qs {
			if rows, _ := s.Tags["db.response.returned_rows"].(float64); int64(rows) == c.Rows &&
				(s.Duration-time.Duration(c.LatencyUS*1e3)).Abs() <= time.Microsecond {
				q = c
			}
		}
		seen[text]++
		op := strings.Fields(q.Query)[0]
		if s.Tags["db.system.name"] != "postgresql" || s.Tags["db.operation.name"] != op || s.Kind != "client" ||
			s.Tags["server.port"] != float64(pg.Opt.Port) || s.Tags["server.address"] != "127.0.0.1" || s.Tags["db.namespace"] != "postgres" ||
			s.Tags["cistern.query.fingerprint"] != q.Fingerprint.String() {
			t.Errorf("span %q: %+v", text, s)
		}
		if rows, _ := s.Tags["db.response.returned_rows"].(float64); int64(rows) != q.Rows {
			t.Errorf("span %q: %v rows, captured %d", text, s.Tags["db.response.returned_rows"], q.Rows)
		}
		if (q.Error != "") != (s.Tags["error.type"] != nil) || (q.Error != "" && s.Tags["error.type"] != "42P01") {
			t.Errorf("span %q: error.type %v for error %q", text, s.Tags["error.type"], q.Error)
		}
		if d := s.Duration - time.Duration(q.LatencyUS*1e3); d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("span %q lasts %v, the query %vµs", text, s.Duration, q.LatencyUS)
		}
	}
	for text, qs := range want {
		if seen[text] != len(qs) {
			t.Errorf("%q: %d spans in Jaeger, want %d", text, seen[text], len(qs))
		}
	}
	// Whatever Jaeger stored, in any field: no sanitized set's secret, and
	// every secret of the raw set (so the search can find them).
	r, err := http.Get("http://127.0.0.1:16686/api/traces?limit=10000&lookback=1h&service=cistern-capture")
	if err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range hidden {
		if strings.Contains(string(all), s) {
			t.Errorf("%q reached Jaeger", s)
		}
	}
	for _, s := range shown {
		if !strings.Contains(string(all), s) {
			t.Errorf("raw: %q did not reach Jaeger", s)
		}
	}

	// The collector goes away: nothing blocks, everything is counted.
	j.Stop()
	stopped = true
	e, err := New(Options{Endpoint: "127.0.0.1:4317", Queue: 64, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := 0; i < 1000; i++ {
		e.Send(run.Queries[i%len(run.Queries)])
	}
	if d := time.Since(t0); d > 500*time.Millisecond*testenv.TimeScale() {
		t.Errorf("1000 sends to a dead collector took %v", d)
	}
	st := e.Close(5 * time.Second)
	t.Logf("collector down: %+v", st)
	if st.Queued+st.Dropped != 1000 || st.Dropped == 0 || st.Exported != 0 || st.Failed == 0 || st.Failed+st.Unsent != st.Queued {
		t.Errorf("counts with the collector down: %+v", st)
	}
}
