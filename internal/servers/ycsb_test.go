package servers_test

import (
	"testing"

	"github.com/cistern-ebpf/cistern/internal/servers"
)

// TestParseGoYCSB reads go-ycsb v1.0.3's plain output: the periodic
// summary before "Run finished" is not the result; each operation's row
// after it is (the real tool's output is parsed by TestYCSBRun in
// bench/pagecache).
func TestParseGoYCSB(t *testing.T) {
	out := `Using request distribution 'zipfian' a keyrange of [0 19999]
***************** properties *****************
"recordcount"="20000"
**********************************************
READ   - Takes(s): 10.0, Count: 5, OPS: 0.5, Avg(us): 9, Min(us): 1, Max(us): 20, 50th(us): 9, 90th(us): 9, 95th(us): 9, 99th(us): 9, 99.9th(us): 9, 99.99th(us): 9
**********************************************
Run finished, takes 2.000950171s
READ   - Takes(s): 2.0, Count: 4010, OPS: 2007.5, Avg(us): 1480, Min(us): 3, Max(us): 48127, 50th(us): 868, 90th(us): 3435, 95th(us): 4611, 99th(us): 9439, 99.9th(us): 29263, 99.99th(us): 48127
TOTAL  - Takes(s): 2.0, Count: 8002, OPS: 4005.9, Avg(us): 1790, Min(us): 3, Max(us): 51071, 50th(us): 1073, 90th(us): 4105, 95th(us): 5391, 99th(us): 10735, 99.9th(us): 30143, 99.99th(us): 51071
UPDATE - Takes(s): 2.0, Count: 3992, OPS: 1998.6, Avg(us): 2101, Min(us): 10, Max(us): 51071, 50th(us): 1304, 90th(us): 4615, 95th(us): 5939, 99th(us): 11455, 99.9th(us): 30207, 99.99th(us): 51071
UPDATE_ERROR - Takes(s): 2.0, Count: 3, OPS: 1.5, Avg(us): 12, Min(us): 10, Max(us): 14, 50th(us): 12, 90th(us): 14, 95th(us): 14, 99th(us): 14, 99.9th(us): 14, 99.99th(us): 14
`
	r, err := servers.ParseGoYCSB(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]servers.YCSBOp{
		"READ":         {Seconds: 2, Count: 4010, OpsPerSec: 2007.5, Avg: 1480, P50: 868, P99: 9439, P999: 29263, Max: 48127},
		"TOTAL":        {Seconds: 2, Count: 8002, OpsPerSec: 4005.9, Avg: 1790, P50: 1073, P99: 10735, P999: 30143, Max: 51071},
		"UPDATE":       {Seconds: 2, Count: 3992, OpsPerSec: 1998.6, Avg: 2101, P50: 1304, P99: 11455, P999: 30207, Max: 51071},
		"UPDATE_ERROR": {Seconds: 2, Count: 3, OpsPerSec: 1.5, Avg: 12, P50: 12, P99: 14, P999: 14, Max: 14},
	}
	if len(r.Ops) != len(want) {
		t.Fatalf("got %d operations %v, want %d", len(r.Ops), r.Ops, len(want))
	}
	for k, w := range want {
		if r.Ops[k] != w {
			t.Errorf("%s: got %+v, want %+v", k, r.Ops[k], w)
		}
	}
	if r.Errors() != 3 {
		t.Errorf("errors: got %d, want 3", r.Errors())
	}
	for _, bad := range []string{"", "READ   - Takes(s): 1.0, Count: 5\n", "Run finished, takes 1s\n(nothing)\n"} {
		if _, err := servers.ParseGoYCSB(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
