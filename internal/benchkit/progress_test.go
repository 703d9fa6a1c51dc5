package benchkit

import (
	"strings"
	"testing"
)

// fakeStderr points progress output at a buffer and pretends stderr is, or
// is not, a terminal.
func fakeStderr(t *testing.T, terminal bool) *strings.Builder {
	t.Helper()
	var b strings.Builder
	oldOut, oldTerm, oldQuiet := progressOut, stderrIsTerminal, Quiet
	progressOut, stderrIsTerminal, Quiet = &b, func() bool { return terminal }, false
	t.Cleanup(func() { progressOut, stderrIsTerminal, Quiet = oldOut, oldTerm, oldQuiet })
	return &b
}

func TestProgressOnTerminal(t *testing.T) {
	out := fakeStderr(t, true)
	bar := Progress(10, "loading keys")
	bar.Add(4)
	bar.Describe("warming up")
	bar.Add(6)
	bar.Finish()
	bar.Finish()
	s := out.String()
	if !strings.Contains(s, "warming up") || !strings.Contains(s, "10/10") {
		t.Errorf("bar output lacks its label or count: %q", s)
	}
	if !strings.HasSuffix(s, "\n") || strings.HasSuffix(s, "\n\n") {
		t.Errorf("a finished bar should end its line exactly once: %q", s)
	}
}

func TestProgressUnknownTotal(t *testing.T) {
	out := fakeStderr(t, true)
	bar := Progress(0, "scanning")
	for range 100 {
		bar.Add(1)
	}
	bar.Finish()
	if !strings.Contains(out.String(), "scanning") {
		t.Errorf("spinner output lacks its label: %q", out.String())
	}
}

func TestProgressSilent(t *testing.T) {
	for _, tc := range []struct {
		name            string
		terminal, quiet bool
		wantStep        bool
	}{
		{"no terminal", false, false, true},
		{"quiet terminal", true, true, false},
		{"quiet, no terminal", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := fakeStderr(t, tc.terminal)
			Quiet = tc.quiet
			bar := Progress(5, "phase")
			bar.Add(5)
			bar.Describe("x")
			bar.Finish()
			if out.Len() != 0 {
				t.Fatalf("silent bar wrote %q", out.String())
			}
			Step("[%d/%d] kerby skew=%.2f get-only", 3, 8, 0.99)
			want := ""
			if tc.wantStep {
				want = "[3/8] kerby skew=0.99 get-only\n"
			}
			if out.String() != want {
				t.Errorf("Step wrote %q, want %q", out.String(), want)
			}
		})
	}
}

func TestStepKeepsOneNewline(t *testing.T) {
	out := fakeStderr(t, false)
	Step("done\n")
	if out.String() != "done\n" {
		t.Errorf("Step wrote %q", out.String())
	}
}
