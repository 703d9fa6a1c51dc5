// Package size reads the byte sizes given on the command line (cache agent
// --limit, cbuf manager --memory): 4096, 64K, 512M, 2G, 1T. Units are
// binary whichever way they are written: 64K, 64KB and 64KiB are all
// 65536 bytes, in any case.
package size

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Errors Parse wraps: a string that is not a size, and a size past
// math.MaxInt64 bytes.
var (
	ErrSyntax = errors.New("want a positive number of bytes with an optional K, M, G or T suffix (binary units), e.g. 512M")
	ErrRange  = errors.New("larger than 8 EiB")
)

// Error is Parse's error: the text given and what is wrong with it.
type Error struct {
	Text string
	Err  error // ErrSyntax or ErrRange
}

func (e *Error) Error() string { return fmt.Sprintf("size %q: %v", e.Text, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// shifts are the suffixes' powers of two.
var shifts = map[byte]uint{'K': 10, 'M': 20, 'G': 30, 'T': 40}

// Parse reads a positive size in bytes: digits, then optionally K, M, G
// or T, optionally followed by B or iB. Zero, a sign, a fraction and a
// size past math.MaxInt64 are errors.
func Parse(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "B")
	shift := uint(0)
	if strings.HasSuffix(t, "I") { // KiB, MiB: the I needs a unit before it
		t = t[:len(t)-1]
		if t == "" || shifts[t[len(t)-1]] == 0 {
			return 0, &Error{s, ErrSyntax}
		}
	}
	if n := len(t); n > 0 && shifts[t[n-1]] != 0 {
		shift, t = shifts[t[n-1]], t[:n-1]
	}
	if t == "" || t[0] < '0' || t[0] > '9' { // no sign, no space inside
		return 0, &Error{s, ErrSyntax}
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, &Error{s, ErrRange}
	}
	if err != nil || v == 0 {
		return 0, &Error{s, ErrSyntax}
	}
	if v > math.MaxInt64>>shift {
		return 0, &Error{s, ErrRange}
	}
	return int64(v << shift), nil
}
