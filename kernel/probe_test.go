package kernel

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// TestRequirementsHaveProbes: every feature the requirement table names
// has a row in the feature table, and every row a probe.
func TestRequirementsHaveProbes(t *testing.T) {
	names := map[string]bool{}
	for _, f := range Features() {
		names[f.Name] = true
		if f.Probe == nil {
			t.Errorf("%s: no probe", f.Name)
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

// TestAnswerNamesTheRelease: a probe's "too old" answer takes the release
// from its row, and other answers keep their reason.
func TestAnswerNamesTheRelease(t *testing.T) {
	f := Feature{Name: "bpf_loop", Since: "5.17", What: "the bpf_loop helper"}
	for _, raw := range []error{ebpf.ErrNotSupported, errTooOld} {
		err := f.answer(raw)
		if !errors.Is(err, ErrMissing) || err.Error() != "the bpf_loop helper: not supported by this kernel (needs Linux 5.17 or newer)" {
			t.Errorf("answer(%v) = %v", raw, err)
		}
	}
	if err := f.answer(fmt.Errorf("%w (no uprobe PMU)", ErrMissing)); !errors.Is(err, ErrMissing) || strings.Contains(err.Error(), "5.17") {
		t.Errorf("a reason of its own: %v", err)
	}
	if err := f.answer(errors.New("EPERM")); errors.Is(err, ErrMissing) || err.Error() != "the bpf_loop helper: EPERM" {
		t.Errorf("another error: %v", err)
	}
	if f.answer(nil) != nil {
		t.Error("nil answer")
	}
}

func TestParseRelease(t *testing.T) {
	for _, c := range []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"6.12.38+deb13-amd64", 6, 12, true},
		{"6.1.0-50-cloud-amd64", 6, 1, true},
		{"6.18.0", 6, 18, true},
		{"5.10", 5, 10, true},
		{"6", 0, 0, false},
		{"unknown", 0, 0, false},
	} {
		ma, mi, ok := parseRelease(c.in)
		if ok != c.ok || ok && (ma != c.major || mi != c.minor) {
			t.Errorf("parseRelease(%q) = %d, %d, %v; want %d, %d, %v", c.in, ma, mi, ok, c.major, c.minor, c.ok)
		}
	}
	ma, mi, ok := parseRelease(Release())
	if !ok || !AtLeast(ma, mi) || AtLeast(ma, mi+1) || !AtLeast(ma-1, 99) {
		t.Errorf("AtLeast around the running release %s (%d.%d, %v) is wrong", Release(), ma, mi, ok)
	}
}

// TestSockmapSelfRedirect: the self-test's own machinery works on every
// kernel (a segment sent after the socket joined the map comes back and
// leaves nothing unread), and its answer is one of the two behaviours,
// never "unknown": 6.12, 6.18 and 7.2 keep the pending segment counted as unread
// (docs/kerby-kv.md, "TCP on each kernel").
func TestSockmapSelfRedirect(t *testing.T) {
	for i := 0; i < 3; i++ {
		if err := selfRedirect(false); err != nil {
			t.Fatalf("a segment redirected after the socket joined the map: %v", err)
		}
		err := selfRedirect(true)
		if err != nil && !errors.Is(err, errPhantomUnread) {
			t.Fatalf("the self-test could not tell: %v", err)
		}
		t.Logf("%s: pending segment redirected in the first read: %v", Release(), err)
	}
}
