package parse

import (
	"fmt"
	"strings"
)

// Pos is a byte offset into the query text.
type Pos int

// Error is a positioned error in a query: line and column (1-based), the
// reason, and the source line with a caret under the column. It is the
// user's input that is wrong: the CLI exits with status 2.
type Error struct {
	Line, Col int
	Msg       string
	Src       string // the offending source line
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d:%d: %s\n  %s\n  %s^", e.Line, e.Col, e.Msg, e.Src, strings.Repeat(" ", e.Col-1))
}

// Errorf positions msg at byte offset p of src.
func Errorf(src string, p Pos, format string, a ...any) *Error {
	if int(p) > len(src) {
		p = Pos(len(src))
	}
	line, start := 1, 0
	for i := 0; i < int(p); i++ {
		if src[i] == '\n' {
			line++
			start = i + 1
		}
	}
	end := strings.IndexByte(src[start:], '\n')
	if end < 0 {
		end = len(src) - start
	}
	col := 1
	for _, r := range src[start:p] {
		_ = r
		col++
	}
	return &Error{Line: line, Col: col, Msg: fmt.Sprintf(format, a...), Src: src[start : start+end]}
}
