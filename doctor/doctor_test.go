package doctor

import (
	"context"
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
	// Nothing left behind.
	if ents, _ := os.ReadDir("/var/run/netns"); len(ents) > 0 {
		for _, e := range ents {
			if len(e.Name()) > 10 && e.Name()[:10] == "cistern-dr" {
				t.Errorf("namespace %s left behind", e.Name())
			}
		}
	}
}
