package capture

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cistern-ebpf/cistern/accum"
)

// rawPreview is how many bytes of a request a raw record shows.
const rawPreview = 256

// rawConn reports a connection as request/response exchanges without
// parsing a protocol (--protocol raw): the direction that speaks first is
// the request side; an exchange ends when that side speaks again after an
// answer, or at close. Query is a printable preview of the request (other
// bytes as \xNN), Rows the answer's size in bytes.
type rawConn struct {
	id       uint64
	reqDir   accum.Direction
	known    bool
	open     bool // an exchange is in progress
	answered bool
	q        Query
	preview  []byte
}

func newRawConn(id uint64) *rawConn { return &rawConn{id: id} }

// side: the end that speaks first is taken as the client.
func (r *rawConn) side() string { return sideOf(r.known, r.reqDir) }

func (r *rawConn) feed(out []Query, dir accum.Direction, b []byte, ft fragTimes, pid uint32) []Query {
	d := dir & 1
	if !r.known {
		r.reqDir, r.known = d, true
	}
	if d == r.reqDir {
		if r.open && r.answered {
			out = r.finish(out)
		}
		if !r.open {
			r.open, r.answered = true, false
			r.q = Query{PID: pid, ConnID: r.id, Protocol: "raw", startNS: ft.first, startOK: ft.opens}
			r.preview = r.preview[:0]
		}
		if n := rawPreview - len(r.preview); n > 0 {
			r.preview = append(r.preview, b[:min(n, len(b))]...)
		}
		return out
	}
	if r.open {
		r.answered = true
		r.q.Rows += int64(len(b))
		r.q.LatencyUS = float64(ft.last-r.q.startNS) / 1e3
		r.q.LatencyExact = r.q.startOK && ft.closes
	}
	return out
}

func (r *rawConn) finish(out []Query) []Query {
	r.q.Query = printable(r.preview)
	r.q.done = true
	r.open = false
	return append(out, r.q)
}

func (r *rawConn) lost() {
	if r.open {
		r.q.Error = "capture lost part of the exchange"
	}
}

func (r *rawConn) close(out []Query) []Query {
	if r.open {
		out = r.finish(out)
	}
	return out
}

func (r *rawConn) bad() uint64 { return 0 } // raw bytes are never unparseable

// printable quotes b for one line: text as is, everything else as \xNN.
func printable(b []byte) string {
	var s strings.Builder
	for len(b) > 0 {
		c, n := utf8.DecodeRune(b)
		switch {
		case c == utf8.RuneError && n <= 1, c < 0x20 && c != ' ', c == 0x7f:
			s.WriteString(`\x`)
			s.WriteString(strconv.FormatUint(uint64(b[0])|0x100, 16)[1:])
			n = 1
		case c == '\\':
			s.WriteString(`\\`)
		default:
			s.Write(b[:n])
		}
		b = b[n:]
	}
	return s.String()
}
