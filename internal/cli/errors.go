// Package cli holds what every cistern subcommand shares: exit codes,
// error kinds and output helpers.
package cli

import (
	"encoding/json"
	"fmt"
	"os"
)

// Exit statuses, as documented in the README; cmd/cistern's exitCode maps
// errors to them.
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
)

// UsageError marks bad flags, arguments or input: exit status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef builds a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// WriteJSON writes v indented to path, or to stdout when path is "-".
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "-" || path == "" {
		_, err = os.Stdout.Write(data)
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// RequireRoot fails with a clear message when not running as root.
func RequireRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s needs root (BPF, namespaces and mounts): run it with sudo", what)
	}
	return nil
}
