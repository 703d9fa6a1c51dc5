package benchkit

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Quiet silences progress bars and Step lines, e.g. for `--json -` or a
// --quiet flag (it can be bound with BoolVar). Set it before a bench starts;
// it is not guarded for concurrent writes.
var Quiet bool

// progressOut is where progress goes, and stderrIsTerminal decides whether
// bars are drawn; tests replace both.
var (
	progressOut      io.Writer = os.Stderr
	stderrIsTerminal           = func() bool { return term.IsTerminal(int(os.Stderr.Fd())) }
)

// Bar is a progress bar on stderr. A Bar made while Quiet is set or stderr
// is not a terminal does nothing, so that logs and CI output carry no
// carriage-return noise; use Step for progress that must reach them.
type Bar struct {
	pb *progressbar.ProgressBar // nil when silent
}

// Progress starts a bar towards total, labelled desc; a total of zero or less
// means unknown, drawn as a spinner.
func Progress(total int64, desc string) *Bar {
	if Quiet || !stderrIsTerminal() {
		return &Bar{}
	}
	if total <= 0 {
		total = -1
	}
	out := progressOut
	return &Bar{pb: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(out),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSpinnerType(14),
		// Keep the finished bar on its own line: it says how long the phase took.
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(out) }),
	)}
}

// Add advances the bar by n.
func (b *Bar) Add(n int64) {
	if b.pb != nil {
		_ = b.pb.Add64(n) // errors only mean overshooting the total; progress is cosmetic
	}
}

// Describe changes the bar's label, e.g. to the phase now running.
func (b *Bar) Describe(s string) {
	if b.pb != nil {
		b.pb.Describe(s)
	}
}

// Finish completes the bar and ends its line. Calling it again is harmless.
func (b *Bar) Finish() {
	if b.pb != nil && !b.pb.IsFinished() {
		_ = b.pb.Finish()
	}
}

// Step prints one progress line to stderr, such as
// "[3/8] kerby skew=0.99 get-only", unless Quiet is set. Unlike a Bar it
// prints without a terminal too: long multi-phase benches under CI or with
// stderr in a file still show where they are. Call it between bars, not
// while one is drawing, or the two share a line.
func Step(format string, args ...any) {
	if Quiet {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	io.WriteString(progressOut, msg)
}
