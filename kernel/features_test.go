package kernel_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// TestProbesAnswer: every probe answers (nil, or ErrMissing) without
// panicking, and a probe that says the kernel is too old names the release
// of its row.
func TestProbesAnswer(t *testing.T) {
	testenv.RequireRoot(t)
	for _, f := range kernel.Features() {
		err := f.Probe()
		t.Logf("%-18s %v", f.Name, err)
		// A kernel without the feature says so (ErrMissing); anything else
		// is a broken probe.
		if err != nil && !errors.Is(err, kernel.ErrMissing) {
			t.Errorf("%s: the probe failed instead of answering: %v", f.Name, err)
		}
		if err != nil && strings.Contains(err.Error(), "needs Linux") && !strings.Contains(err.Error(), "needs Linux "+f.Since+" ") {
			t.Errorf("%s: %v does not name its row's release %s", f.Name, err, f.Since)
		}
	}
	for _, s := range kernel.Systems() {
		t.Logf("%-14s %-11s %s", s.Name, s.Status, s.Detail)
	}
}
