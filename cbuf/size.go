package cbuf

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize reads sizes like 64M, 512KiB, 1G or 4096.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	mul := uint64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mul, t = 1<<10, t[:n-1]
		case 'M':
			mul, t = 1<<20, t[:n-1]
		case 'G':
			mul, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("size %q: give a number of bytes with an optional K, M or G suffix, e.g. 64M", s)
	}
	return v * mul, nil
}
