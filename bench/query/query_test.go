package querybench

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestQueryBenchRuns drives a miniature query bench end to end with every
// mode that exists here and checks what it reports (not how fast).
func TestQueryBenchRuns(t *testing.T) {
	testenv.RequireRoot(t)
	modes := []string{"hand_written", "optimizer", "mvsf_only"}
	_, btErr := exec.LookPath("bpftrace")
	if btErr == nil {
		modes = append(modes, "bpftrace")
	}
	rep, err := Run(context.Background(), Options{Quick: true, Runtime: time.Second, Rounds: 2, Modes: modes})
	testenv.NotInstalled(t, err)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Modes map[string]map[string]json.RawMessage `json:"modes"`
		Notes []string                              `json:"notes"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", data)
	row := func(mode, q string) map[string]any {
		raws, ok := doc.Modes[mode+" "+q]
		if !ok {
			return nil
		}
		m := map[string]any{}
		for k, raw := range raws {
			var v any
			json.Unmarshal(raw, &v)
			m[k] = v
		}
		return m
	}
	var base float64
	json.Unmarshal(doc.Modes["untraced"]["iops"], &base)
	if base <= 0 {
		t.Fatalf("untraced iops %v", base)
	}
	for _, mode := range modes {
		for _, q := range []string{"q1", "q2"} {
			r := row(mode, q)
			if r == nil {
				t.Errorf("modes.%s.%s missing", mode, q)
				continue
			}
			for _, k := range []string{"iops", "probe_effect_pct", "probe_effect_pct_min", "probe_effect_pct_max", "events", "lost_events"} {
				if _, ok := r[k]; !ok {
					t.Errorf("modes.%s.%s has no %s", mode, q, k)
				}
			}
			if r["events"].(float64) <= 0 || r["iops"].(float64) <= 0 {
				t.Errorf("modes.%s.%s: %v", mode, q, r)
			}
			if q == "q1" && mode != "hand_written" {
				// The bench reports strict agreement; here the comparison
				// must have run and matched nearly every key (a mode that
				// loses events under load may miss a few maxima).
				keys, _ := r["max_latency_keys"].(float64)
				ok, _ := r["max_latency_keys_agreeing"].(float64)
				if keys < 3 || ok < 0.9*keys {
					t.Errorf("modes.%s.q1: %v of %v keys agree with the reference: %v", mode, ok, keys, r)
				}
			}
		}
	}
	if _, _, _, ok := rep.RatioSpread("q1_optimizer_minus_hand_written_pct_points"); !ok {
		t.Error("no per-round q1 optimizer - hand_written difference")
	}
	if med, lo, _, ok := rep.RatioSpread("q1_optimizer_vs_hand_written_bpf_ns_per_read"); !ok || !(lo > 0) || !(med > 0) {
		t.Errorf("q1 optimizer/hand_written BPF ns per read: %v (min %v, recorded %v)", med, lo, ok)
	}
	// The reference writes every syscall: fio's reads all appear, none lost.
	h := row("hand_written", "q2")
	if h["lost_events"].(float64) != 0 || h["events_pread64"] != h["workload_syscalls"] || h["workload_syscalls"].(float64) <= 0 {
		t.Errorf("hand_written q2: %v", h)
	}
}

func TestCompareMaxima(t *testing.T) {
	ref := map[maxKey]uint64{{1, "read"}: 1_000_000, {1, "pread64"}: 20_000}
	ok := compareMaxima(ref, map[maxKey]uint64{{1, "read"}: 1_019_000, {1, "pread64"}: 110_000})
	if !ok.agree || ok.keys != 2 || ok.agreeing != 2 {
		t.Errorf("within 2%% and 100µs: %+v", ok)
	}
	off := compareMaxima(ref, map[maxKey]uint64{{1, "read"}: 1_200_000, {1, "pread64"}: 130_000})
	if off.agree || off.agreeing != 0 {
		t.Errorf("200µs and 110µs off: %+v", off)
	}
	extra := compareMaxima(ref, map[maxKey]uint64{{1, "read"}: 1_000_000, {1, "pread64"}: 20_000, {2, "read"}: 5})
	if extra.agree || extra.keys != 3 {
		t.Errorf("extra key: %+v", extra)
	}
	if compareMaxima(nil, nil).agree {
		t.Error("nothing seen cannot agree")
	}
}

func TestSyscallKey(t *testing.T) {
	for in, want := range map[string]string{"pread64": "pread64", "17": "pread64", "335": "sys_335", "sys_335": "sys_335"} {
		if got := syscallKey(in); got != want {
			t.Errorf("syscallKey(%q) = %q, want %q", in, got, want)
		}
	}
}
