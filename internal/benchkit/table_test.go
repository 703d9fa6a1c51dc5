package benchkit

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestFormatFloat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "0"},
		{12, "12"},
		{1234567, "1234567"},
		{1.5e9, "1500000000"},
		{123456.789, "123457"},
		{3.57142857, "3.571"},
		{1, "1"},
		{0.99, "0.990"},
		{0.5, "0.500"},
		{0.001234, "0.00123"},
		{-0.5, "-0.500"},
		{-2.25, "-2.250"},
		{1e-20, "1e-20"},
		{math.NaN(), "n/a"},
		{math.Inf(1), "n/a"},
	} {
		if got := FormatFloat(tc.in); got != tc.want {
			t.Errorf("FormatFloat(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	type count uint32
	for _, tc := range []struct {
		in   any
		want string
	}{
		{nil, "-"},
		{int64(-42), "-42"},
		{uint64(math.MaxUint64), "18446744073709551615"},
		{count(7), "7"},
		{float32(0.25), "0.250"},
		{true, "true"},
		{"xdp", "xdp"},
		{1500 * time.Microsecond, "1.5ms"},
		{map[string]int{"b": 2, "a": 1}, "a=1 b=2"},
		{map[int]float64{2: 0.5, 1: 1000}, "1=1000 2=0.500"},
		{[]float64{1.5, 2}, "[1.500 2]"},
		{(*int)(nil), "-"},
	} {
		if got := FormatValue(tc.in); got != tc.want {
			t.Errorf("FormatValue(%#v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	r := New("kv", true)
	r.kernel = "6.8.0-test" // the real release varies from machine to machine
	r.SetConfig("keys", 100000)
	r.SetConfig("skew", 0.99)
	r.Set("memcached", "ops_per_sec", 345678.4)
	r.Set("memcached", "p99_us", 45.6)
	r.Set("kerby", "ops_per_sec", 1234567.0)
	r.Set("kerby", "hit_ratio", 0.987654)
	r.Set("kerby", "p99_us", 12.3)
	r.Ratio("kerby_vs_memcached", 1234567.0/345678.4)
	r.Target("kerby_vs_memcached", 3.5714, ">=", 2)
	r.Target("lost_events", 3, "==", 0)
	r.Note("client-bound: server CPU per op also reported")

	var b strings.Builder
	r.WriteTable(&b)
	want := `bench kv (kernel 6.8.0-test, quick run)
config: keys=100000  skew=0.990

mode       ops_per_sec  p99_us  hit_ratio
memcached       345678  45.600          -
kerby          1234567  12.300      0.988

ratio               value
kerby_vs_memcached  3.571

target                got  op  want  result
kerby_vs_memcached  3.571  >=     2    PASS
lost_events             3  ==     0    FAIL

notes:
  - client-bound: server CPU per op also reported
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteTableEmpty(t *testing.T) {
	var b strings.Builder
	New("none", false).WriteTable(&b)
	if s := b.String(); !strings.Contains(s, "full run") || !strings.Contains(s, "(no results)") ||
		strings.Contains(s, "ratio") || strings.Contains(s, "notes") || strings.Contains(s, "config") {
		t.Errorf("empty table:\n%s", s)
	}
}
