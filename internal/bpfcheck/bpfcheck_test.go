package bpfcheck

import (
	"os"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestAllProgramsLoad loads every BPF object in the tree on the running
// kernel: a new program is covered the moment `make generate` builds it.
func TestAllProgramsLoad(t *testing.T) {
	testenv.RequireRoot(t)
	wd, _ := os.Getwd()
	root, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := Uncovered(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("%s has no go:generate line: it is never built or loaded", m)
	}
	objs, err := Objects(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 2 {
		t.Fatalf("found only %d BPF objects under %s", len(objs), root)
	}
	total := 0
	for _, o := range objs {
		n, err := Load(o)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		total += n
		t.Logf("%s: %d programs loaded", strings.TrimPrefix(o, root+"/"), n)
	}
	t.Logf("%d objects, %d programs verified", len(objs), total)
}

// TestUnboundedProgramIsRefused shows the load test can fail: an object
// with an unbounded map-value access must be refused by the verifier.
func TestUnboundedProgramIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := Load("testdata/unbounded.bpf.o")
	if err == nil {
		t.Fatal("the verifier accepted a program with an unbounded access")
	}
	if !IsVerifierError(err) {
		t.Fatalf("want a verifier refusal, got %v", err)
	}
	if !strings.Contains(err.Error(), "unbounded") && !strings.Contains(err.Error(), "invalid access") {
		t.Errorf("refusal does not name the unbounded access: %v", err)
	}
}
