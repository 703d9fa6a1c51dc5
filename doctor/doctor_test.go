package doctor

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestDoctorCoreOK(t *testing.T) {
	testenv.RequireRoot(t)
	rep := Run(context.Background(), Options{SkipTools: true})
	if len(rep.Checks) < 14 {
		t.Errorf("only %d checks", len(rep.Checks))
	}
	for _, c := range rep.Checks {
		t.Logf("%-18s %-11s %s", c.Name, c.Status, c.Detail)
		if c.Core && c.Status != OK {
			t.Errorf("core check %s: %s (%s)", c.Name, c.Status, c.Detail)
		}
	}
	for _, name := range []string{"kprobe", "fentry"} {
		c := rep.Find(name)
		if c == nil || c.Status == "" || c.Detail == "" {
			t.Errorf("%s check missing or empty: %+v", name, c)
		}
	}
	// Nothing left behind (its own namespaces: other tests may run a doctor).
	for _, side := range []string{"srv", "cli"} {
		name := fmt.Sprintf("/var/run/netns/cistern-dr%d-%s", os.Getpid()%100000, side)
		if _, err := os.Stat(name); err == nil {
			t.Errorf("namespace %s left behind", name)
		}
	}
}
