package kernel

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// RefusedError is a load the kernel's verifier refused, told in one
// sentence. Every program in the tree loads on the kernels of the matrix
// (docs/kernels.md), so a refusal is a Cistern bug or an untested kernel: the
// user gets what was refused and why in a few words, and the verifier's log
// goes to LogFile for the bug report instead of the terminal.
type RefusedError struct {
	What, Program, Reason, LogFile string
	Err                            error
}

func (e *RefusedError) Error() string {
	where := ""
	if e.Program != "" {
		where = "program " + e.Program + ": "
	}
	s := fmt.Sprintf("Linux %s refused %s (%s%s); this is a Cistern bug: please report it with the output of `cistern doctor --json`",
		Release(), e.What, where, e.Reason)
	if e.LogFile != "" {
		s += " and the verifier's log in " + e.LogFile
	}
	return s
}

func (e *RefusedError) Unwrap() error { return e.Err }

// FailedError is a load that failed before or beside the verifier (a map
// the kernel would not create, a missing permission): "load what: err".
type FailedError struct {
	What string
	Err  error
}

func (e *FailedError) Error() string {
	if errors.Is(e.Err, unix.EPERM) {
		// Tracing programs need CAP_PERFMON (and BPF itself CAP_BPF):
		// say so rather than cilium/ebpf's MEMLOCK hint.
		return fmt.Sprintf("load %s: not permitted: run as root, or with CAP_BPF and CAP_PERFMON (%v)", e.What, e.Err)
	}
	return fmt.Sprintf("load %s: %v", e.What, e.Err)
}
func (e *FailedError) Unwrap() error { return e.Err }

// IsLoadError tells whether err is, or wraps, one of LoadError's: a load
// the kernel refused or failed, which no flag can fix (a runtime error,
// exit status 1, in the CLI).
func IsLoadError(err error) bool {
	return errors.As(err, new(*RefusedError)) || errors.As(err, new(*FailedError))
}

var progName = regexp.MustCompile(`program ([A-Za-z0-9_]+):`)

// LoadError wraps an error from loading what (a collection or program): a
// verifier refusal becomes a *RefusedError, anything else a *FailedError
// ("load what: err").
func LoadError(what string, err error) error {
	if err == nil {
		return nil
	}
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		return &FailedError{What: what, Err: err}
	}
	r := &RefusedError{What: what, Err: err, Reason: "its verifier refused it"}
	if m := progName.FindStringSubmatch(err.Error()); m != nil {
		r.Program = m[1]
	}
	log := strings.Join(ve.Log, "\n")
	switch {
	case errors.Is(ve.Cause, unix.E2BIG) || strings.Contains(log, "program is too large"):
		r.Reason = "too complex for its verifier"
	case errors.Is(ve.Cause, unix.EPERM) || strings.Contains(log, "for !root"):
		// Without CAP_PERFMON the verifier refuses what it allows root
		// (pointer arithmetic "prohibited for !root"): a missing
		// capability, not a bug.
		r.Reason = "not permitted: run as root, or with CAP_BPF and CAP_PERFMON"
	}
	if len(ve.Log) > 0 {
		name := strings.Map(func(c rune) rune {
			if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
				return c
			}
			return '-'
		}, strings.ToLower(what+"-"+r.Program))
		// A fresh name, 0600 (CreateTemp): the log quotes the program's
		// constants, and a fixed name in /tmp could be planted by another user.
		if f, ferr := os.CreateTemp("", "cistern-verifier-"+name+"-*.log"); ferr == nil {
			_, werr := f.WriteString(err.Error() + "\n\n" + log + "\n")
			if f.Close() == nil && werr == nil {
				r.LogFile = f.Name()
			} else {
				os.Remove(f.Name())
			}
		}
	}
	return r
}
