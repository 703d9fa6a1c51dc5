package evict

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRegistryMatchesObjects: every row names objects that exist and say
// what the row says (evict_periodic, getscan_scan_ids, pc_apply), and every
// stub in bpf/evict and bpf/pagecache is some row's object, so a policy
// cannot be half added.
func TestRegistryMatchesObjects(t *testing.T) {
	named := map[string]bool{}
	for _, p := range Registry() {
		if p.Objects != nil {
			continue // another package's policy
		}
		for _, k := range []Kind{Replay, PageCache} {
			if p.object(k) == "" {
				continue
			}
			named[p.object(k)] = true
			spec, err := p.Spec(k)
			if err != nil {
				t.Error(err)
				continue
			}
			if _, ok := spec.Programs["evict_periodic"]; ok != p.Periodic {
				t.Errorf("%s %s object: evict_periodic %v, row says Periodic %v", p.Name, k, ok, p.Periodic)
			}
			if _, ok := spec.Maps["getscan_scan_ids"]; ok != p.ScanIDs {
				t.Errorf("%s %s object: getscan_scan_ids %v, row says ScanIDs %v", p.Name, k, ok, p.ScanIDs)
			}
			want := map[Kind]string{Replay: "evict_replay", PageCache: "pc_apply"}[k]
			if _, ok := spec.Programs[want]; !ok {
				t.Errorf("%s %s object has no program %s", p.Name, k, want)
			}
		}
	}
	built, err := fs.Glob(objects, "*_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range built {
		if !named[o] {
			t.Errorf("%s is no registry row's object: add the row (evict/registry.go) or remove its stub", o)
		}
	}
	for _, dir := range []string{"../bpf/evict/*.bpf.c", "../bpf/pagecache/pc_*.bpf.c"} {
		srcs, _ := filepath.Glob(dir)
		for _, src := range srcs {
			o := strings.TrimSuffix(filepath.Base(src), ".bpf.c") + "_bpfel.o"
			if !slices.Contains(built, o) {
				t.Errorf("%s is not built: run make generate", src)
			}
		}
	}
}

// TestLookup: the one check of a name, by kind and use.
func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind
		ok   bool
	}{
		{"lru", Replay, true}, {"lru", PageCache, true},
		{"clock", Replay, true}, {"clock", PageCache, false},
		{"scan-only", PageCache, true}, {"scan-only", Replay, false},
		{"none", PageCache, true}, {"broken", Replay, true}, // test binaries only
		{"nope", Replay, false}, {"", PageCache, false},
	} {
		p, err := Lookup(tc.name, tc.kind)
		var unknown *UnknownPolicyError
		if tc.ok && (err != nil || p.Name != tc.name) {
			t.Errorf("Lookup(%q, %s): %v", tc.name, tc.kind, err)
		}
		if !tc.ok && !errors.As(err, &unknown) {
			t.Errorf("Lookup(%q, %s): %v, want an *UnknownPolicyError", tc.name, tc.kind, err)
		}
	}
	_, err := Lookup("nope", PageCache)
	if want := `policy "nope": want one of fifo, get-scan, lfu, lhd, lru, mru, s3fifo, scan-only, wtinylfu`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	for _, k := range []Kind{Replay, PageCache} {
		for _, n := range Names(k) {
			if n == "broken" || n == "none" {
				t.Errorf("Names(%s) offers %s", k, n)
			}
		}
	}
	if err := Register(Policy{Name: "lru", Replay: "lru", Objects: os.DirFS(".")}); err == nil {
		t.Error("a second lru registered")
	}
	if err := Register(Policy{Name: "x", Replay: "missing", Objects: os.DirFS(".")}); err == nil {
		t.Error("a policy without its object registered")
	}
}
