package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDamonSchemes reads a DAMON sysfs tree laid out as this machine's
// (a kdamond paging out physical memory idle for 12 aggregation intervals
// of 5 s, 128 MiB a second) beside one that is off and one whose scheme
// only counts.
func TestDamonSchemes(t *testing.T) {
	root := t.TempDir()
	put := func(p, v string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kd := func(n, state, action string) {
		c := n + "/contexts/0/"
		put(n+"/state", state)
		put(c+"operations", "paddr")
		put(c+"monitoring_attrs/intervals/aggr_us", "5000000")
		put(c+"schemes/0/action", action)
		put(c+"schemes/0/access_pattern/age/min", "12")
		put(c+"schemes/0/quotas/bytes", "134217728")
		put(c+"schemes/0/quotas/reset_interval_ms", "1000")
	}
	kd("0", "on", "pageout")
	kd("1", "off", "pageout")
	kd("2", "on", "stat")
	got := damonSchemes(root)
	if len(got) != 1 {
		t.Fatalf("got %q, want kdamond 0's pageout only", got)
	}
	for _, want := range []string{"kdamond 0", "pageout on paddr memory", "unaccessed for 1m0s", "128 MiB per 1s"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("%q lacks %q", got[0], want)
		}
	}
	if got := damonSchemes(filepath.Join(root, "absent")); got != nil {
		t.Errorf("no DAMON: got %q", got)
	}
	t.Logf("this machine: %s", PageReclaim().Detail)
}
