package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The recorded guest outputs of a fast 6.1 run (make kernel-matrix
// KERNELS=6.1 from a clone under /tmp; testdata/guest-6.1/README says
// how they were cut down): the results directory collect() reads.
const recorded = "testdata/guest-6.1"

// recordedRoot is the tree the recorded run tested (object paths in
// loadall.out are under it).
const recordedRoot = "/tmp/mx"

// guestRun copies the recorded results into a directory of the test's own,
// lets edit change them, and collects and decides them as runKernel does.
func guestRun(t *testing.T, edit func(dir string)) *kernelResult {
	t.Helper()
	dir := t.TempDir()
	ents, err := os.ReadDir(recorded)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(recorded, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if edit != nil {
		edit(dir)
	}
	r := &kernelResult{Kernel: "6.1", Objects: map[string]string{}, Steps: map[string]stepResult{}, Systems: map[string]cell{}, Replay: map[string]string{}}
	collect(r, recordedRoot, dir, false, nil)
	return r
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDecideRecorded: the recorded run as it was (testdata/guest-6.1/README):
// pool and kv passed (kv degraded on 6.1: cls_bpf, no TCX); accum's test failed; the load-all test timed out after
// 18 objects, which fails the kernel's run; the steps that had not run are
// the matrix's ERROR, not their systems' FAIL.
func TestDecideRecorded(t *testing.T) {
	r := guestRun(t, nil)
	if len(r.Objects) != 18 {
		t.Errorf("%d objects read from loadall.out, want 18", len(r.Objects))
	}
	for o, st := range r.Objects {
		if st != "ok" || strings.HasPrefix(o, "/") {
			t.Errorf("object %s: %s", o, st)
		}
	}
	want := map[string]string{
		"pool":      "works: ",
		"kv":        "degraded: cls_bpf instead of TCX",
		"accum":     "FAIL: accum tests: TestOverheadSmallFragments",
		"capture":   "ERROR: matrix error: capture-attach: did not run (no exit code: the guest stopped before it); capture: did not run",
		"evict":     "ERROR: matrix error: cache: did not run (no exit code: the guest stopped before it); evict: did not run",
		"pagecache": "ERROR: matrix error: pagecache: did not run",
		"cbuf":      "ERROR: matrix error: cbuf-kcomp: did not run (no exit code: the guest stopped before it); cbuf: did not run",
		"query":     "ERROR: matrix error: query: did not run",
	}
	for _, sys := range systemOrder {
		got := r.Systems[sys].Status + ": " + r.Systems[sys].Why
		if !strings.HasPrefix(got, want[sys]) {
			t.Errorf("%s = %q, want %q…", sys, got, want[sys])
		}
	}
	if r.Error != "loadall tests: exit 2: panic: test timed out after 10m0s" {
		t.Errorf("run error %q", r.Error)
	}
	table := summaryTable([]*kernelResult{r})
	if !strings.Contains(table, "| 6.1 |") || !strings.Contains(table, "| FAIL |") || !strings.Contains(table, "| ERROR |") {
		t.Errorf("summary table:\n%s", table)
	}
}

// passedOnRetry makes the accum step pass, with first as the output of
// its failed first run.
func passedOnRetry(first string) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		write(t, filepath.Join(dir, "accum.rc"), "0\n")
		b, _ := os.ReadFile(filepath.Join(dir, "accum.out"))
		write(t, filepath.Join(dir, "accum.out"), strings.ReplaceAll(string(b), "--- FAIL", "--- PASS"))
		write(t, filepath.Join(dir, "accum.first.out"), first)
	}
}

// TestDecideVerdicts: the same outputs changed one way each, and the cell
// each change must give.
func TestDecideVerdicts(t *testing.T) {
	base := guestRun(t, nil)
	for _, c := range []struct {
		name      string
		edit      func(t *testing.T, dir string)
		sys, want string // the system's cell, and a piece of its why
	}{
		{"failed test", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "pool.out"))
			write(t, filepath.Join(dir, "pool.out"), string(b)+"--- FAIL: TestResize (5.17s)\nFAIL\n")
			write(t, filepath.Join(dir, "pool.rc"), "1\n")
		}, "pool", "FAIL: pool tests: TestResize"},
		{"a failed step passes on its retry", passedOnRetry("--- FAIL: TestFlushTimer (1.00s)\nFAIL\n"),
			"accum", "works: accum passed on its retry (first run failed: TestFlushTimer)"},
		{"a crash passes on its retry", passedOnRetry("=== RUN   TestA\n--- PASS: TestA (0.10s)\n=== RUN   TestB\nunexpected fault address 0x7f\nfatal error: fault\n[signal SIGSEGV]\n"),
			"accum", "works: accum passed on its retry (first run failed: TestB: fatal error: fault)"},
		{"exit without a failed test", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "evict.out"), "panic: test timed out after 10m0s\n")
			write(t, filepath.Join(dir, "evict.rc"), "2\n")
		}, "evict", "FAIL: evict tests: exit 2: panic: test timed out"},
		{"cd refused", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "cbuf.out"))
			write(t, filepath.Join(dir, "cbuf.start"), "sh: cd: line 1: can't cd to /tmp/mx/cbuf: No such file or directory\n")
			write(t, filepath.Join(dir, "cbuf.rc"), "125\n")
		}, "cbuf", "ERROR: matrix error: cbuf-kcomp: did not run (no exit code: the guest stopped before it); cbuf: the guest could not start it (cannot cd to its package directory: sh: cd: line 1: can't cd to /tmp/mx/cbuf"},
		{"binary missing", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "query.start"), "/results/bin/query.test: not found\n")
			write(t, filepath.Join(dir, "query.rc"), "127\n")
		}, "query", "ERROR: matrix error: query: the guest could not start it (its test binary is not there"},
		{"never ran", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "kv.rc"))
		}, "kv", "ERROR: matrix error: kv: did not run"},
		{"a real failure beside an unstartable step", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "kvgen.rc"), "125\n")
			b, _ := os.ReadFile(filepath.Join(dir, "kv.out"))
			write(t, filepath.Join(dir, "kv.out"), string(b)+"--- FAIL: TestXDP (1.00s)\n")
			write(t, filepath.Join(dir, "kv.rc"), "1\n")
		}, "kv", "FAIL: kv tests: TestXDP; kvgen: the guest could not start it (cannot cd to its package directory"},
		{"object refused", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "loadall.out"))
			s := strings.Replace(string(b), "evict/lru_bpfel.o: 3 programs loaded", "evict/lru_bpfel.o: load program lru_run: permission denied", 1)
			if s == string(b) {
				t.Fatal("loadall.out has no evict/lru_bpfel.o line")
			}
			write(t, filepath.Join(dir, "loadall.out"), s)
		}, "evict", "FAIL: evict/lru_bpfel.o refused; cache: did not run"},
		{"doctor says unavailable", func(t *testing.T, dir string) {
			b, err := os.ReadFile("testdata/doctor-5.10.json")
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "doctor.json"), string(b))
			write(t, filepath.Join(dir, "capture.rc"), "1\n")
			write(t, filepath.Join(dir, "capture-attach.rc"), "1\n")
		}, "capture", "unsupported: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := guestRun(t, func(dir string) { c.edit(t, dir) })
			got := r.Systems[c.sys].Status + ": " + r.Systems[c.sys].Why
			if !strings.HasPrefix(got, c.want) && !strings.Contains(got, c.want) {
				t.Errorf("%s = %q, want %q", c.sys, got, c.want)
			}
			for _, sys := range systemOrder { // the others keep the recorded verdict
				if sys != c.sys && r.Systems[sys] != base.Systems[sys] && c.name != "doctor says unavailable" {
					t.Errorf("%s changed too: %+v, recorded %+v", sys, r.Systems[sys], base.Systems[sys])
				}
			}
		})
	}
	t.Run("replays", func(t *testing.T) {
		host := map[string]string{"lru/10000": "0.775078", "s3fifo/10000": "0.799801", "lhd/1000": "0.654612", "get-scan/1000000/bytes": "0.724439"}
		r := &kernelResult{Kernel: "6.1", Objects: map[string]string{}, Steps: map[string]stepResult{}, Systems: map[string]cell{}, Replay: map[string]string{}}
		dir := t.TempDir()
		for _, f := range []string{"evict", "cache"} {
			write(t, filepath.Join(dir, f+".rc"), "0\n")
		}
		write(t, filepath.Join(dir, "replay-lru.json"), `{"hit_ratio": 0.775078}`)
		write(t, filepath.Join(dir, "replay-lhd.json"), `{"hit_ratio": 0.654612}`)
		write(t, filepath.Join(dir, "replay-get-scan-bytes.json"), `{"hit_ratio": 0.724439}`)
		collect(r, recordedRoot, dir, false, host) // s3fifo's replay never ran
		if c := r.Systems["evict"]; c.Status != "ERROR" || c.Why != "matrix error: replay s3fifo/10000: did not run" {
			t.Errorf("evict with one replay not run: %+v", c)
		}
		write(t, filepath.Join(dir, "replay-s3fifo.json"), `{"hit_ratio": 0.8}`)
		collect(r, recordedRoot, dir, false, host)
		if c := r.Systems["evict"]; c.Status != "FAIL" || !strings.Contains(c.Why, "replay s3fifo/10000 DIFFERS: guest 0.800000, host 0.799801") {
			t.Errorf("evict with a replay that differs: %+v", c)
		}
	})
	t.Run("load-all could not start", func(t *testing.T) {
		r := guestRun(t, func(dir string) {
			os.Remove(filepath.Join(dir, "loadall.out"))
			write(t, filepath.Join(dir, "loadall.start"), "/results/bin/internal-bpfcheck.test: not found\n")
			write(t, filepath.Join(dir, "loadall.rc"), "127\n")
		})
		if !strings.HasPrefix(r.Error, "matrix error: loadall: the guest could not start it") {
			t.Errorf("run error %q", r.Error)
		}
	})
}
