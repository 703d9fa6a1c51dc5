package evict

import (
	"testing"

	"github.com/cistern-ebpf/cistern/internal/bpfcheck"
)

// TestRunArgsLayout: runArgs is struct evict_run_args, as every policy's
// object was built.
func TestRunArgsLayout(t *testing.T) {
	for _, row := range Registry() {
		if row.Replay == "" {
			continue
		}
		p := row.Name
		spec, err := row.Spec(Replay)
		if err != nil {
			t.Fatal(err)
		}
		typ, err := spec.Types.AnyTypeByName("evict_run_args")
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := bpfcheck.Layout(typ, runArgs{}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
