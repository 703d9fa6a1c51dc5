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

// TestDecideRecorded: the recorded run as it was: every object loads, every
// system works, no step failed or errored.
func TestDecideRecorded(t *testing.T) {
	r := guestRun(t, nil)
	if len(r.Objects) < 30 {
		t.Errorf("%d objects read from loadall.out", len(r.Objects))
	}
	for o, st := range r.Objects {
		if st != "ok" {
			t.Errorf("object %s: %s", o, st)
		}
	}
	for _, sys := range systemOrder {
		if c := r.Systems[sys]; c.Status != "works" {
			t.Errorf("%s: %s (%s)", sys, c.Status, c.Why)
		}
	}
	if r.Error != "" {
		t.Errorf("run error %q", r.Error)
	}
	table := summaryTable([]*kernelResult{r})
	if !strings.Contains(table, "| 6.1 |") || strings.Contains(table, "FAIL") || strings.Contains(table, "ERROR") {
		t.Errorf("summary table:\n%s", table)
	}
}

// TestDecideVerdicts: the same outputs changed one way each, and the cell
// each change must give.
func TestDecideVerdicts(t *testing.T) {
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
		{"exit without a failed test", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "evict.out"), "panic: test timed out after 10m0s\n")
			write(t, filepath.Join(dir, "evict.rc"), "2\n")
		}, "evict", "FAIL: evict tests: exit 2: panic: test timed out"},
		{"cd refused", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "cbuf.out"))
			write(t, filepath.Join(dir, "cbuf.start"), "sh: cd: line 1: can't cd to /tmp/mx/cbuf: No such file or directory\n")
			write(t, filepath.Join(dir, "cbuf.rc"), "125\n")
		}, "cbuf", "ERROR: matrix error: cbuf: the guest could not start it (cannot cd to its package directory: sh: cd: line 1: can't cd to /tmp/mx/cbuf"},
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
		}, "kv", "FAIL: kv tests: TestXDP; kvgen: the guest could not start it"},
		{"object refused", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "loadall.out"))
			s := strings.Replace(string(b), "pagecache/track_bpfel.o: 6 programs loaded", "pagecache/track_bpfel.o: load program pc_add: permission denied", 1)
			if s == string(b) {
				t.Fatal("loadall.out has no pagecache/track_bpfel.o line")
			}
			write(t, filepath.Join(dir, "loadall.out"), s)
		}, "pagecache", "FAIL: pagecache/track_bpfel.o refused"},
		{"doctor says unavailable", func(t *testing.T, dir string) {
			b, err := os.ReadFile("testdata/doctor-5.10.json")
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "doctor.json"), string(b))
			write(t, filepath.Join(dir, "capture.rc"), "1\n")
		}, "capture", "unsupported: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := guestRun(t, func(dir string) { c.edit(t, dir) })
			got := r.Systems[c.sys].Status + ": " + r.Systems[c.sys].Why
			if !strings.HasPrefix(got, c.want) && !strings.Contains(got, c.want) {
				t.Errorf("%s = %q, want %q", c.sys, got, c.want)
			}
			for _, sys := range systemOrder { // the others keep the recorded verdict
				if sys != c.sys && r.Systems[sys].Status != "works" && c.name != "doctor says unavailable" {
					t.Errorf("%s changed too: %+v", sys, r.Systems[sys])
				}
			}
		})
	}
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
