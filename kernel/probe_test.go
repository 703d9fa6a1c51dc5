package kernel

import (
	"errors"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestProbesAnswer: every probe answers (nil, or ErrMissing with the
// release that has the feature) without panicking, and every feature the
// requirement table names has a probe.
func TestProbesAnswer(t *testing.T) {
	testenv.RequireRoot(t)
	names := map[string]bool{}
	for _, f := range Features() {
		names[f.Name] = true
		err := f.Probe()
		t.Logf("%-18s %v", f.Name, err)
		// A kernel without the feature says so (ErrMissing); anything else
		// is a broken probe.
		if err != nil && !errors.Is(err, ErrMissing) {
			t.Errorf("%s: the probe failed instead of answering: %v", f.Name, err)
		}
	}
	for _, r := range requirements {
		for _, f := range r.needs {
			if !names[f] {
				t.Errorf("%s needs %q, which no probe answers", r.name, f)
			}
		}
		for _, fb := range r.fallbacks {
			if !names[fb.feature] {
				t.Errorf("%s falls back without %q, which no probe answers", r.name, fb.feature)
			}
		}
	}
	for _, s := range Systems() {
		t.Logf("%-14s %-11s %s", s.Name, s.Status, s.Detail)
	}
}

func fakeKernel(missing ...string) func(string) error {
	return func(f string) error {
		for _, m := range missing {
			if f == m {
				return errors.Join(ErrMissing)
			}
		}
		return nil
	}
}

func systemsByName(ss []System) map[string]System {
	m := map[string]System{}
	for _, s := range ss {
		m[s.Name] = s
	}
	return m
}

// TestSystemsWithoutTCX: Linux 6.1 has everything but TCX, cachestat and
// mm_filemap_get_pages: kv falls back to cls_bpf, pagecache to read/pread64
// and mincore, everything else is ok.
func TestSystemsWithoutTCX(t *testing.T) {
	ss := systemsByName(SystemsFor(fakeKernel("tcx", "cachestat", "filemap_get_pages", "struct_ops_link")))
	if len(ss) != len(requirements) {
		t.Fatalf("%d systems, want %d", len(ss), len(requirements))
	}
	kv := ss["kv"]
	if kv.Status != SystemDegraded || !strings.Contains(kv.Detail, "cls_bpf instead of TCX") {
		t.Errorf("kv without TCX: %+v", kv)
	}
	pc := ss["pagecache"]
	if pc.Status != SystemDegraded || !strings.Contains(pc.Detail, "read/pread64") || !strings.Contains(pc.Detail, "mincore") {
		t.Errorf("pagecache without mm_filemap_get_pages and cachestat: %+v", pc)
	}
	for _, n := range []string{"pool", "accum/capture", "evict/cache", "cbuf", "query"} {
		if ss[n].Status != SystemOK {
			t.Errorf("%s: %+v, want ok", n, ss[n])
		}
	}
}

// TestSystemsOn510: without BPF atomics, bpf_loop and bpf_timer (5.10),
// the systems that use them are unavailable and say what they need; cbuf
// and query run.
func TestSystemsOn510(t *testing.T) {
	ss := systemsByName(SystemsFor(fakeKernel("atomics", "bpf_loop", "bpf_timer", "for_each_map_elem", "xdp_load_bytes",
		"syscall_prog", "struct_ops_link", "cachestat", "tcx", "filemap_get_pages")))
	for _, n := range []string{"kv", "accum/capture", "evict/cache", "pagecache"} {
		if s := ss[n]; s.Status != SystemUnavailable || !strings.Contains(s.Detail, "bpf_loop (Linux 5.17)") {
			t.Errorf("%s: %+v, want unavailable, needs bpf_loop (Linux 5.17)", n, s)
		}
	}
	if s := ss["accum/capture"]; !strings.Contains(s.Detail, "bpf_timer (Linux 5.15)") {
		t.Errorf("accum/capture: %+v, want bpf_timer named", s)
	}
	if s := ss["pool"]; s.Status != SystemUnavailable || !strings.Contains(s.Detail, "atomics (Linux 5.12)") {
		t.Errorf("pool: %+v, want unavailable, needs atomics (Linux 5.12)", s)
	}
	for _, n := range []string{"cbuf", "query"} {
		if ss[n].Status != SystemOK {
			t.Errorf("%s: %+v, want ok", n, ss[n])
		}
	}
}
