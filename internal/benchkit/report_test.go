package benchkit

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
)

func decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, data)
	}
	return m
}

func TestReportJSON(t *testing.T) {
	r := New("kv", true)
	r.SetConfig("skew", 0.99)
	r.SetConfig("keys", 100000)
	r.Set("memcached", "ops_per_sec", 1234.5)
	r.Set("kerby", "p99_us", 12)
	r.Set("kerby", "ops_per_sec", 5000.0)
	r.Set("kerby", "xdp_hit", true)
	r.Set("kerby", "latency_hist_us", map[string]int{"10": 3, "100": 1})
	r.Ratio("kerby_vs_memcached", 5000/1234.5)
	if !r.Target("speedup", 4.05, ">=", 2) {
		t.Error("4.05 >= 2 reported as failing")
	}
	r.Note("client-bound: server CPU per op also reported")

	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("\n  \"bench\": \"kv\"")) {
		t.Errorf("want indented JSON, got:\n%s", data)
	}
	m := decode(t, data)
	want, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if m["bench"] != "kv" || m["quick"] != true || m["kernel"] != strings.TrimSpace(string(want)) {
		t.Errorf("header: bench=%v quick=%v kernel=%v, want kv true %s", m["bench"], m["quick"], m["kernel"], want)
	}
	if got := m["config"].(map[string]any)["keys"]; got != 100000.0 {
		t.Errorf("config.keys = %v", got)
	}
	kerby := m["modes"].(map[string]any)["kerby"].(map[string]any)
	if kerby["ops_per_sec"] != 5000.0 || kerby["p99_us"] != 12.0 || kerby["xdp_hit"] != true {
		t.Errorf("modes.kerby = %v", kerby)
	}
	if h := kerby["latency_hist_us"].(map[string]any); h["10"] != 3.0 {
		t.Errorf("nested map = %v", h)
	}
	if got := m["ratios"].(map[string]any)["kerby_vs_memcached"].(float64); math.Abs(got-4.0502) > 1e-3 {
		t.Errorf("ratio = %v", got)
	}
	tg := m["targets"].([]any)[0].(map[string]any)
	if tg["name"] != "speedup" || tg["got"] != 4.05 || tg["op"] != ">=" || tg["want"] != 2.0 || tg["pass"] != true {
		t.Errorf("target = %v", tg)
	}
	if n := m["notes"].([]any); len(n) != 1 || n[0] != "client-bound: server CPU per op also reported" {
		t.Errorf("notes = %v", n)
	}

	// Insertion order, not alphabetical order, throughout.
	s := string(data)
	for _, pair := range [][2]string{
		{`"skew"`, `"keys"`},
		{`"memcached"`, `"kerby"`},
		{`"p99_us"`, `"ops_per_sec": 5000`},
		{`"bench"`, `"kernel"`}, {`"kernel"`, `"quick"`}, {`"quick"`, `"config"`},
		{`"config"`, `"modes"`}, {`"modes"`, `"ratios"`}, {`"ratios"`, `"targets"`}, {`"targets"`, `"notes"`},
	} {
		if i, j := strings.Index(s, pair[0]), strings.Index(s, pair[1]); i < 0 || j < 0 || i > j {
			t.Errorf("%s should come before %s in:\n%s", pair[0], pair[1], s)
		}
	}
}

func TestReportJSONEmpty(t *testing.T) {
	data, err := json.Marshal(New("empty", false))
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, data)
	for _, k := range []string{"config", "modes", "ratios"} {
		if v, ok := m[k].(map[string]any); !ok || len(v) != 0 {
			t.Errorf("%s = %#v, want {}", k, m[k])
		}
	}
	for _, k := range []string{"targets", "notes"} {
		if v, ok := m[k].([]any); !ok || len(v) != 0 {
			t.Errorf("%s = %#v, want []", k, m[k])
		}
	}
}

func TestReportJSONNonFinite(t *testing.T) {
	r := New("nan", false)
	r.Set("a", "hit_ratio", math.NaN())
	r.Set("a", "per_cpu", map[string]float64{"0": math.Inf(1), "1": 2})
	r.Set("a", "samples", []float64{1, math.NaN()})
	r.Ratio("a_vs_b", math.Inf(-1))
	r.Target("ratio", math.NaN(), ">=", 1)
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("non-finite values must not fail the JSON: %v", err)
	}
	m := decode(t, data)
	a := m["modes"].(map[string]any)["a"].(map[string]any)
	if v, ok := a["hit_ratio"]; !ok || v != nil {
		t.Errorf("NaN metric = %v, want null", v)
	}
	if pc := a["per_cpu"].(map[string]any); pc["0"] != nil || pc["1"] != 2.0 {
		t.Errorf("per_cpu = %v", pc)
	}
	if s := a["samples"].([]any); s[0] != 1.0 || s[1] != nil {
		t.Errorf("samples = %v", s)
	}
	if v := m["ratios"].(map[string]any)["a_vs_b"]; v != nil {
		t.Errorf("ratio = %v, want null", v)
	}
	if tg := m["targets"].([]any)[0].(map[string]any); tg["got"] != nil || tg["pass"] != false {
		t.Errorf("target = %v", tg)
	}
}

func TestSetReplacesInPlace(t *testing.T) {
	r := New("b", false)
	r.Set("m1", "x", 1)
	r.Set("m2", "x", 2)
	r.Set("m1", "y", 3)
	r.Set("m1", "x", 10)
	if v, ok := r.Get("m1", "x"); !ok || v != 10 {
		t.Errorf("Get(m1, x) = %v %v", v, ok)
	}
	if _, ok := r.Get("m3", "x"); ok {
		t.Error("Get of a missing mode succeeded")
	}
	if len(r.modes) != 2 || r.modes[0].name != "m1" || strings.Join(r.modes[0].metrics.keys, ",") != "x,y" {
		t.Errorf("order after replace: modes=%d first=%s keys=%v", len(r.modes), r.modes[0].name, r.modes[0].metrics.keys)
	}
}

func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		got  float64
		op   string
		want float64
		pass bool
	}{
		{2, ">=", 2, true}, {1.9, ">=", 2, false},
		{2, "<=", 2, true}, {2.1, "<=", 2, false},
		{0, "==", 0, true}, {1, "==", 0, false},
		{math.NaN(), "<=", 1, false}, {math.NaN(), "==", math.NaN(), false},
	} {
		r := New("t", false)
		if got := r.Target("x", tc.got, tc.op, tc.want); got != tc.pass {
			t.Errorf("%v %s %v = %v, want %v", tc.got, tc.op, tc.want, got, tc.pass)
		}
		if r.TargetsPassed() != tc.pass || r.Targets()[0].Pass != tc.pass {
			t.Errorf("%v %s %v not recorded as %v", tc.got, tc.op, tc.want, tc.pass)
		}
	}
	r := New("t", false)
	if !r.TargetsPassed() {
		t.Error("no targets should count as passed")
	}
	r.Target("a", 1, ">=", 0)
	r.Target("b", 1, "<=", 0)
	r.Target("c", 1, "==", 1)
	if r.TargetsPassed() {
		t.Error("one failing target among three should fail the report")
	}
	defer func() {
		if recover() == nil {
			t.Error("an unknown op should panic")
		}
	}()
	r.Target("bad", 1, ">", 0)
}

func TestReportConcurrent(t *testing.T) {
	r := New("c", false)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mode := string(rune('a' + i))
			for j := range 100 {
				r.Set(mode, "n", j)
				r.Ratio(mode, float64(j))
			}
		}()
	}
	wg.Wait()
	if len(r.modes) != 8 {
		t.Errorf("%d modes, want 8", len(r.modes))
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}
