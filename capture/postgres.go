package capture

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/cistern-ebpf/cistern/accum"
)

// Untyped frontend messages (length, then this code) at a stream's start.
const (
	pgProtocol3  = 196608
	pgSSLRequest = 80877103
	pgGSSENC     = 80877104
	pgCancel     = 80877102
	pgMaxMessage = 1 << 30
)

// pgConn parses one connection's PostgreSQL protocol as seen by a client
// (write: frontend messages, read: backend messages) or a server (the
// reverse: detected from the first message's direction).
type pgConn struct {
	id       uint64
	buf      [2][]byte
	started  [2]bool // past the untyped startup messages
	headOK   [2]bool // the first buffered message's first byte opened a batch
	frontDir accum.Direction
	known    bool              // frontDir decided
	stmts    map[string]string // prepared statement -> text
	portals  map[string]string // portal -> text
	pending  []*Query
	free     []*Query // answered queries, reused by newQuery
	skipping [2]bool  // after a loss: drop bytes until a plausible message
	pid      uint32
	extOpen  bool   // an extended-protocol exchange is open (until Sync)
	extNS    uint64 // when its first message was sent: its Executes started there
	extOK    bool
	user, db string
	badBytes uint64 // skipped as unparseable
}

func (p *pgConn) bad() uint64 { return p.badBytes }

func (p *pgConn) side() string { return sideOf(p.known, p.frontDir) }

func newPGConn(id uint64) *pgConn {
	return &pgConn{id: id, stmts: map[string]string{}, portals: map[string]string{}}
}

// lost drops what a gap made unparseable.
func (p *pgConn) lost() {
	p.buf[0], p.buf[1] = nil, nil
	p.skipping = [2]bool{true, true}
	for _, q := range p.pending {
		q.Error = "capture lost part of the exchange"
	}
}

func isFrontendType(t byte) bool { return strings.IndexByte("QPBEDCSHXFdcfp", t) >= 0 }
func isBackendType(t byte) bool  { return strings.IndexByte("RSKZTDCEINnt12s3AGHWdcv", t) >= 0 }

// feed parses the bytes b of direction dir that arrived in a batch with
// times ft and appends the queries they completed to out.
func (p *pgConn) feed(out []Query, dir accum.Direction, b []byte, ft fragTimes, pid uint32) []Query {
	p.pid = pid
	d := dir & 1
	if p.skipping[d] {
		// Resynchronise at a fragment that starts like a message.
		if len(b) < 5 || !(isFrontendType(b[0]) || isBackendType(b[0])) {
			p.badBytes += uint64(len(b))
			return out
		}
		p.skipping[d] = false
	}
	// Parse straight from b when nothing is buffered; only an incomplete
	// tail is copied (into a buffer reused from call to call).
	var m []byte
	if len(p.buf[d]) == 0 {
		p.headOK[d] = ft.opens // the next message's first byte begins a batch
		m = b
	} else {
		p.buf[d] = append(p.buf[d], b...)
		m = p.buf[d]
	}
	for {
		if !p.started[d] {
			// Startup-phase untyped messages: int32 length, int32 code.
			if len(m) < 8 {
				return p.keep(d, m, out)
			}
			if m[0] == 0 {
				n := int(binary.BigEndian.Uint32(m))
				code := binary.BigEndian.Uint32(m[4:])
				if code == pgProtocol3 || code == pgSSLRequest || code == pgGSSENC || code == pgCancel {
					if !p.known {
						p.frontDir, p.known = dir, true
					}
					if n < 8 || n > len(m) {
						if n < 8 || n > pgMaxMessage {
							p.badBytes += uint64(len(m))
							p.lost()
							return out
						}
						return p.keep(d, m, out)
					}
					if code == pgProtocol3 {
						p.startup(m[8:n])
					}
					m = m[n:]
					p.headOK[d] = false
					continue
				}
			}
			p.started[d] = true
		}
		if len(m) < 5 {
			return p.keep(d, m, out)
		}
		n := int(binary.BigEndian.Uint32(m[1:]))
		if n < 4 || n > pgMaxMessage {
			p.badBytes += uint64(len(m))
			p.lost()
			return out
		}
		if len(m) < 1+n {
			return p.keep(d, m, out)
		}
		typ, body := m[0], m[5:1+n]
		m = m[1+n:]
		atStart := p.headOK[d]
		p.headOK[d] = false
		if !p.known {
			// A client writes queries first; a server reads them first.
			p.frontDir, p.known = dir, true
			if !isFrontendType(typ) || (isBackendType(typ) && typ != 'Q' && typ != 'P') {
				p.frontDir = dir ^ 1
			}
		}
		if dir == p.frontDir {
			p.frontend(typ, body, ft.first, atStart)
		} else {
			out = p.backend(out, typ, body, ft.last, ft.closes && len(m) == 0)
		}
	}
}

// keep buffers the unparsed rest m of direction d and returns out.
func (p *pgConn) keep(d accum.Direction, m []byte, out []Query) []Query {
	p.buf[d] = append(p.buf[d][:0], m...) // m may alias p.buf[d]: append moves safely
	return out
}

// startup takes user and database from a StartupMessage's parameters.
func (p *pgConn) startup(b []byte) {
	for len(b) > 0 && b[0] != 0 {
		var k, v string
		k, b = cstring(b)
		v, b = cstring(b)
		switch k {
		case "user":
			p.user = v
		case "database":
			p.db = v
		}
	}
	if p.db == "" {
		p.db = p.user // PostgreSQL's default
	}
}

func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

func (p *pgConn) frontend(typ byte, body []byte, ts uint64, exact bool) {
	if !p.extOpen && strings.IndexByte("PBDE", typ) >= 0 {
		p.extOpen, p.extNS, p.extOK = true, ts, exact
	}
	switch typ {
	case 'S':
		p.extOpen = false
	case 'Q':
		q, _ := cstring(body)
		p.pending = append(p.pending, p.newQuery(Query{Query: q, startNS: ts, startOK: exact}))
	case 'P':
		name, rest := cstring(body)
		q, _ := cstring(rest)
		p.stmts[name] = q
	case 'B':
		portal, rest := cstring(body)
		stmt, _ := cstring(rest)
		p.portals[portal] = p.stmts[stmt]
	case 'E':
		portal, _ := cstring(body)
		p.pending = append(p.pending, p.newQuery(Query{Query: p.portals[portal], startNS: p.extNS, startOK: p.extOK, extended: true}))
	case 'C': // Close statement or portal
		if len(body) > 1 {
			name, _ := cstring(body[1:])
			if body[0] == 'S' {
				delete(p.stmts, name)
			} else {
				delete(p.portals, name)
			}
		}
	}
}

// newQuery returns a pending query, reusing one already answered.
func (p *pgConn) newQuery(v Query) *Query {
	if n := len(p.free); n > 0 {
		q := p.free[n-1]
		p.free = p.free[:n-1]
		*q = v
		return q
	}
	q := v
	return &q
}

func (p *pgConn) backend(out []Query, typ byte, body []byte, ts uint64, exact bool) []Query {
	// The query answered now: the first one not done. Extended-protocol
	// queries are done at CommandComplete but, like simple ones, end at
	// ReadyForQuery (the answer's last byte).
	var head *Query
	for _, q := range p.pending {
		if !q.done {
			head = q
			break
		}
	}
	switch typ {
	case 'D':
		if head != nil {
			head.dataRows++
		}
	case 'C':
		if head == nil {
			return out
		}
		if n, ok := tagRows(body); ok {
			head.tagRows += n
			head.hasTag = true
		}
		head.done = head.extended
	case 'I', 's':
		if head != nil {
			head.done = head.extended
		}
	case 'E':
		if head == nil {
			return out
		}
		head.Error = pgError(body)
		if head.extended {
			// The server skips the rest up to Sync: those never ran.
			head.done = true
			kept := p.pending[:0]
			for _, q := range p.pending {
				if q.done || !q.extended {
					kept = append(kept, q)
				}
			}
			p.pending = kept
		}
	case 'Z':
		for len(p.pending) > 0 {
			q := p.pending[0]
			if q.extended && !q.done {
				break // its Sync is still to come
			}
			p.pending = append(p.pending[:0], p.pending[1:]...) // keeps the array: no regrowth
			out = append(out, finish(q, ts, exact, "postgres", p.pid, p.id, p.user, p.db))
			p.free = append(p.free, q)
			if !q.extended {
				break // one ReadyForQuery per simple Query
			}
		}
		return out
	}
	return out
}

// tagRows is the row count ending a CommandComplete tag ("SELECT 3",
// "INSERT 0 1"), without allocating.
func tagRows(body []byte) (int64, bool) {
	if i := bytes.IndexByte(body, 0); i >= 0 {
		body = body[:i]
	}
	i := bytes.LastIndexByte(body, ' ')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(body[i+1:]), 10, 64) // no allocation: the conversion does not escape
	return n, err == nil
}

// pgError renders an ErrorResponse as "SEVERITY CODE: message".
func pgError(b []byte) string {
	var sev, code, msg string
	for len(b) > 0 && b[0] != 0 {
		t := b[0]
		var v string
		v, b = cstring(b[1:])
		switch t {
		case 'S':
			sev = v
		case 'C':
			code = v
		case 'M':
			msg = v
		}
	}
	return strings.TrimSpace(sev + " " + code + ": " + msg)
}

// close ends the connection: queries still waiting never got an answer.
func (p *pgConn) close(out []Query) []Query {
	for _, q := range p.pending {
		if q.Error == "" {
			q.Error = "connection closed before the answer"
		}
		out = append(out, finish(q, q.startNS, false, "postgres", p.pid, p.id, p.user, p.db))
	}
	p.pending = nil
	return out
}
