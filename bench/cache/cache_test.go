package cachebench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestBenchTiny runs the bench on a synthetic trace of 100 distinct keys
// (a loop over all of them, then a hot set of 5): sizes 5% and 50% are 5 and
// 50 objects, and the hits of a loop of 100 through FIFO and LRU are known.
func TestBenchTiny(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Exclusive(t, testenv.Traffic) // a loopback/veth flood: not beside another package's flood or --all capture
	var reqs []evict.Request
	for range 3 {
		for k := range 100 {
			reqs = append(reqs, evict.Request{Key: uint64(k), Size: 1})
		}
	}
	for i := range 1000 {
		reqs = append(reqs, evict.Request{Key: uint64(i % 5), Size: 1})
	}
	rep, curves, err := Run(Options{
		Traces:   []Trace{{Name: "tiny", Reqs: reqs}, {Name: "tiny2", Reqs: reqs[:300]}},
		Policies: []string{"fifo", "lru", "s3fifo"},
		Percents: []float64{5, 50},
		Quick:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// A loop over 100 keys never hits in a FIFO or LRU smaller than 100;
	// then keys 0..4 miss once each (at 5: they were evicted by the loop;
	// at 50: keys 50..99 are resident) and hit 995 times.
	want := 995.0 / 1300
	for _, p := range []string{"fifo", "lru"} {
		for _, m := range []string{"tiny_hit_ratio_5pct", "tiny_hit_ratio_50pct"} {
			v, ok := rep.Get(p, m)
			if !ok || v.(float64) != want {
				t.Errorf("%s %s = %v, want %v", p, m, v, want)
			}
		}
		if v, ok := rep.Get(p, "tiny2_hit_ratio_50pct"); !ok || v.(float64) != 0 {
			t.Errorf("%s tiny2 at 50%%: %v, want 0", p, v)
		}
		if v, ok := rep.Get(p, "tiny_requests_per_sec"); !ok || v.(float64) <= 0 || len(rep.Samples(p, "tiny_requests_per_sec")) != 3 {
			t.Errorf("%s requests_per_sec: %v", p, v)
		}
	}
	if len(curves) != 6 || curves[0].Policy != "fifo" || curves[0].Trace != "tiny" ||
		!reflect.DeepEqual(curves[0].MissRatios, []float64{1 - want, 1 - want}) {
		t.Errorf("curves: %+v", curves)
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Bench  string                        `json:"bench"`
		Quick  bool                          `json:"quick"`
		Config map[string]any                `json:"config"`
		Modes  map[string]map[string]float64 `json:"modes"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	if j.Bench != "cache" || !j.Quick || len(j.Modes) != 3 || j.Config["tiny_distinct"] != 100.0 ||
		!reflect.DeepEqual(j.Config["tiny_sizes"], []any{5.0, 50.0}) {
		t.Errorf("json: %s", b)
	}

	dir := t.TempDir()
	paths, err := PlotCurves(filepath.Join(dir, "mrc.png"), curves)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(paths, []string{filepath.Join(dir, "mrc-tiny.png"), filepath.Join(dir, "mrc-tiny2.png")}) {
		t.Errorf("plot paths %v", paths)
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", p, err)
		}
	}
}

func TestBenchHelpers(t *testing.T) {
	if got := PlotPaths("a/b.png", []string{"x"}); !reflect.DeepEqual(got, []string{"a/b.png"}) {
		t.Errorf("one trace: %v", got)
	}
	if got := PlotPaths("b", []string{"x", "y"}); !reflect.DeepEqual(got, []string{"b-x.png", "b-y.png"}) {
		t.Errorf("two traces: %v", got)
	}
	if SizeAt(143542, 1) != 1435 || SizeAt(10, 1) != 1 {
		t.Error("SizeAt")
	}
	if PercentLabel(2.5) != "2_5pct" || PercentLabel(10) != "10pct" {
		t.Error("PercentLabel")
	}
	ps := Policies()
	if ps[0] != "fifo" || contains(ps, "broken") || !contains(ps, "s3fifo") {
		t.Errorf("policies %v", ps)
	}
	if _, _, err := Run(Options{}); err == nil {
		t.Error("empty bench accepted")
	}
}
