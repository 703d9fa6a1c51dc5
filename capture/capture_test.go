package capture

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestCapturePsqlOverTLS runs psql over TLS against a real PostgreSQL and
// checks that every statement it sent is captured with its outcome.
func TestCapturePsqlOverTLS(t *testing.T) {
	testenv.RequireRoot(t)
	tc := testenv.TLSCert(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54347, Conf: tc.PostgresConf()})
	checkCapturePsql(t, pg, "sslmode=require", Options{})
}

// TestCapturePsqlPlain runs psql without TLS against a PostgreSQL without
// TLS and captures it through the socket-syscall tracepoints.
func TestCapturePsqlPlain(t *testing.T) {
	testenv.RequireRoot(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54348})
	checkCapturePsql(t, pg, "sslmode=disable", Options{Transport: TransportPlain})
}

func checkCapturePsql(t *testing.T, pg *servers.Postgres, sslmode string, opt Options) []Query {
	t.Helper()
	issued := []string{
		"SELECT 1 AS one;",
		"SELECT generate_series(1, 5);",
		"CREATE TABLE capture_t (a int, b text);",
		"INSERT INTO capture_t VALUES (1, 'x'), (2, 'y'), (3, 'z');",
		"SELECT * FROM no_such_table;",
		"SELECT b FROM capture_t WHERE a >= 2 ORDER BY a;",
	}
	run, err := CapturePsql(pg.Bin("psql"),
		fmt.Sprintf("%s host=127.0.0.1 port=%d user=postgres dbname=postgres", sslmode, pg.Opt.Port), issued, opt)
	if err != nil {
		t.Fatal(err)
	}
	got, st := run.Queries, run.Stats
	t.Logf("psql output: %q", run.Output)
	for _, q := range got {
		t.Logf("captured: %+v", q)
	}
	t.Logf("channel: %+v, gaps %v", st, run.Gaps)

	if len(got) != len(issued) {
		t.Fatalf("captured %d queries, issued %d", len(got), len(issued))
	}
	wantRows := []int64{1, 5, 0, 3, 0, 2}
	for i, q := range got {
		if q.Query != issued[i] {
			t.Errorf("query %d: captured %q, issued %q", i, q.Query, issued[i])
		}
		if q.Rows != wantRows[i] {
			t.Errorf("query %d (%s): %d rows, want %d", i, q.Query, q.Rows, wantRows[i])
		}
		if (i == 4) != (q.Error != "") {
			t.Errorf("query %d (%s): error %q", i, q.Query, q.Error)
		}
		if q.PID != got[0].PID || q.PID == 0 || q.Protocol != "postgres" || q.LatencyUS <= 0 {
			t.Errorf("query %d: pid %d protocol %s latency %v", i, q.PID, q.Protocol, q.LatencyUS)
		}
		// A query is one write and its answer ends a turn: both ends carry
		// their own segment times, whatever the batching.
		if !q.LatencyExact || q.LatencyUS > 5e6 {
			t.Errorf("query %d: latency %v us, exact %v", i, q.LatencyUS, q.LatencyExact)
		}
	}
	if !strings.Contains(got[4].Error, "42P01") {
		t.Errorf("error of %q: %q, want SQLSTATE 42P01", got[4].Query, got[4].Error)
	}
	if st.LostRecords != 0 || st.LostBytes != 0 || len(run.Gaps) != 0 {
		t.Errorf("loss: %+v gaps %v", st, run.Gaps)
	}
	// The client closed its connection, or the server's backend exited.
	if run.Open != 0 {
		t.Errorf("%d connections never ended", run.Open)
	}
	return got
}
