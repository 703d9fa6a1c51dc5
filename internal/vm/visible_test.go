package vm

import (
	"strings"
	"testing"
)

// A tree under /tmp is visible in the guest (its scratch disk is
// /cistern-scratch); one under a path the guest mounts for itself is
// refused in one sentence.
func TestVisible(t *testing.T) {
	for _, ok := range []string{"/tmp/mx", "/work/main", "/home/u/cistern", "/runner/x"} {
		if err := Visible(ok); err != nil {
			t.Errorf("Visible(%s): %v", ok, err)
		}
	}
	for _, bad := range []string{"/run/user/0/cistern", "/cistern-scratch/x", "/dev/shm/c", "/results/x"} {
		err := Visible(bad)
		if err == nil || strings.Count(err.Error(), ". ") > 0 || !strings.Contains(err.Error(), "clone it elsewhere") {
			t.Errorf("Visible(%s) = %v, want one sentence saying to clone it elsewhere", bad, err)
		}
	}
	if !strings.Contains(stage2, "TMPDIR=/cistern-scratch") || strings.Contains(stage2, " /tmp") {
		t.Errorf("stage2 must mount its scratch disk at /cistern-scratch, not over /tmp:\n%s", stage2)
	}
}
