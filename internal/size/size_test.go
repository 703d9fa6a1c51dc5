package size

import (
	"errors"
	"math"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096},
		{"4096B", 4096},
		{"64K", 64 << 10},
		{"64k", 64 << 10},
		{"64KB", 64 << 10},
		{"64KiB", 64 << 10},
		{"64kib", 64 << 10},
		{"512M", 512 << 20},
		{"512MiB", 512 << 20},
		{" 2G ", 2 << 30},
		{"2GB", 2 << 30},
		{"1T", 1 << 40},
		{"1TiB", 1 << 40},
		{"8388607T", 8388607 << 40}, // the largest whole number of TiB
		{"9223372036854775807", math.MaxInt64},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		in   string
		want error
	}{
		{"", ErrSyntax},
		{"B", ErrSyntax},
		{"K", ErrSyntax},
		{"iB", ErrSyntax},
		{"64iB", ErrSyntax},
		{"0", ErrSyntax},
		{"0M", ErrSyntax},
		{"-1", ErrSyntax},
		{"+64M", ErrSyntax},
		{"1.5G", ErrSyntax},
		{"64 M", ErrSyntax},
		{"64X", ErrSyntax},
		{"64MM", ErrSyntax},
		{"0x40", ErrSyntax},
		{"8388608T", ErrRange},
		{"9223372036854775808", ErrRange},
		{"99999999999999999999", ErrRange},
		{"9007199254740992K", ErrRange},
		{"17179869184G", ErrRange},
	} {
		got, err := Parse(c.in)
		if !errors.Is(err, c.want) {
			t.Errorf("Parse(%q) = %d, %v; want %v", c.in, got, err, c.want)
			continue
		}
		var se *Error
		if !errors.As(err, &se) || se.Text != c.in {
			t.Errorf("Parse(%q): error %v does not name the text", c.in, err)
		}
	}
}
