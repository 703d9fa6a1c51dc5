package capture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/cistern-ebpf/cistern/accum"
)

// MySQL/MariaDB client/server protocol: packets of a 3-byte little-endian
// length, a sequence id and the payload; a command (sequence 0) from the
// client, then the server's answer: OK, ERR, or a result set (column count,
// column definitions, [EOF], rows, EOF or OK).
const (
	myMaxPayload = 0xffffff // a payload this long continues in the next packet
	myMaxMessage = 64 << 20 // larger logical packets are treated as garbage

	comQuit             = 0x01
	comInitDB           = 0x02
	comQuery            = 0x03
	comChangeUser       = 0x11
	comStmtPrepare      = 0x16
	comStmtExecute      = 0x17
	comStmtSendLongData = 0x18
	comStmtClose        = 0x19
	comLast             = 0x1f // COM_RESET_CONNECTION: no command is higher

	capConnectWithDB = 0x8
	capProtocol41    = 0x200
	capSSL           = 0x800
	capSecureConn    = 0x8000
	capPluginAuth    = 0x80000
	capLenencAuth    = 0x200000
	capDeprecateEOF  = 0x1000000

	statusMoreResults = 0x8
)

// Stages of a command's answer.
const (
	myFirst   = iota // OK, ERR or a result set's column count
	myCols           // column definitions
	myColsEOF        // the EOF after them (without CLIENT_DEPRECATE_EOF)
	myRows           // rows, up to EOF/OK (or ERR)
	mySkip           // COM_STMT_PREPARE's parameter and column definitions
)

type myCmd struct {
	q      Query
	report bool   // a query (COM_QUERY, COM_STMT_EXECUTE); others only keep the sequence
	cmd    byte   // the command byte
	text   string // COM_STMT_PREPARE: the statement
	stage  int
	left   uint64 // definitions left to read (myCols, mySkip)
}

// myConn parses one connection's MySQL/MariaDB protocol as seen by a client
// (write: commands) or a server (read: commands), like pgConn.
type myConn struct {
	id       uint64
	buf      [2][]byte
	big      [2][]byte // payload of a packet continued over 16 MiB packets
	headOK   [2]bool
	frontDir accum.Direction
	known    bool
	authed   bool // in the command phase
	tls      bool // the client asked for TLS: the rest of this stream is ciphertext
	caps     uint32
	user, db string
	stmts    map[uint32]string
	pending  []*myCmd
	skipping [2]bool
	pid      uint32
	badBytes uint64
}

func newMyConn(id uint64) *myConn { return &myConn{id: id, stmts: map[uint32]string{}} }

func (p *myConn) bad() uint64 { return p.badBytes }

func (p *myConn) side() string { return sideOf(p.known, p.frontDir) }

// lost drops what a gap made unparseable: a packet boundary is found again at
// the next command the client sends.
func (p *myConn) lost() {
	p.buf, p.big = [2][]byte{}, [2][]byte{}
	p.skipping = [2]bool{true, true}
	for _, c := range p.pending {
		c.q.Error = "capture lost part of the exchange"
	}
}

// feed parses the bytes b of direction dir (see pgConn.feed).
func (p *myConn) feed(out []Query, dir accum.Direction, b []byte, ft fragTimes, pid uint32) []Query {
	p.pid = pid
	d := dir & 1
	if p.tls {
		return out
	}
	if p.skipping[d] {
		// Resynchronise: a client packet that is a whole command, or the
		// server's first answer packet to one.
		if len(b) < 5 || !p.plausibleStart(dir, b) {
			p.badBytes += uint64(len(b))
			return out
		}
		p.skipping[d] = false
	}
	var m []byte
	if len(p.buf[d]) == 0 {
		p.headOK[d] = ft.opens
		m = b
	} else {
		p.buf[d] = append(p.buf[d], b...)
		m = p.buf[d]
	}
	for len(m) >= 4 {
		n := int(m[0]) | int(m[1])<<8 | int(m[2])<<16
		if len(m) < 4+n {
			break
		}
		seq, payload := m[3], m[4:4+n]
		m = m[4+n:]
		atStart := p.headOK[d]
		p.headOK[d] = false
		if n == myMaxPayload || len(p.big[d]) > 0 {
			if len(p.big[d])+n > myMaxMessage {
				p.badBytes += uint64(len(p.big[d]) + n)
				p.lost()
				return out
			}
			p.big[d] = append(p.big[d], payload...)
			if n == myMaxPayload {
				continue
			}
			payload, p.big[d] = p.big[d], nil
		}
		if !p.known {
			p.known = true
			p.frontDir = dir
			if seq == 0 && len(payload) > 0 && payload[0] == 10 {
				p.frontDir = dir ^ 1 // the server's greeting
			} else if seq == 0 && len(payload) > 0 && payload[0] <= comLast {
				p.authed = true // attached in the command phase
			} else if seq != 1 && seq != 2 {
				p.frontDir = dir ^ 1 // an answer
			}
		}
		if dir == p.frontDir {
			p.frontend(seq, payload, ft.first, atStart)
			if p.tls {
				return out
			}
		} else {
			out = p.backend(out, payload, ft.last, ft.closes && len(m) == 0)
		}
	}
	p.buf[d] = append(p.buf[d][:0], m...)
	return out
}

func (p *myConn) plausibleStart(dir accum.Direction, b []byte) bool {
	n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
	if n == 0 || n > myMaxPayload {
		return false
	}
	if p.known && dir == p.frontDir {
		return b[3] == 0 && b[4] >= comQuit && b[4] <= comLast
	}
	return b[3] == 1 && len(p.pending) > 0
}

func (p *myConn) frontend(seq byte, b []byte, ts uint64, exact bool) {
	if !p.authed {
		if seq != 0 && len(b) >= 32 && p.caps == 0 {
			p.handshakeResponse(b)
		}
		return
	}
	if seq != 0 || len(b) == 0 {
		return // LOAD DATA contents, authentication of COM_CHANGE_USER
	}
	c := &myCmd{cmd: b[0], q: Query{startNS: ts, startOK: exact}}
	switch b[0] {
	case comQuery:
		c.report, c.q.Query = true, string(b[1:])
	case comStmtPrepare:
		c.text = string(b[1:])
	case comStmtExecute:
		if len(b) < 5 {
			p.badBytes += uint64(len(b))
			return
		}
		id := binary.LittleEndian.Uint32(b[1:])
		text, ok := p.stmts[id]
		if !ok {
			text = fmt.Sprintf("(statement %d, prepared before the capture)", id)
		}
		c.report, c.q.Query, c.q.extended = true, text, true
	case comStmtClose:
		if len(b) >= 5 {
			delete(p.stmts, binary.LittleEndian.Uint32(b[1:]))
		}
		return // no answer
	case comStmtSendLongData, comQuit:
		return // no answer
	case comInitDB:
		p.db = string(b[1:])
	case comChangeUser:
		p.changeUser(b[1:])
		p.authed = false // authentication again, then OK
		return
	default:
		if b[0] > comLast {
			p.badBytes += uint64(len(b))
			return
		}
	}
	p.pending = append(p.pending, c)
}

// handshakeResponse takes the capabilities, user and database from the
// client's HandshakeResponse41 (an SSLRequest is its first 32 bytes alone).
func (p *myConn) handshakeResponse(b []byte) {
	caps := binary.LittleEndian.Uint32(b)
	if caps&capProtocol41 == 0 {
		return
	}
	p.caps = caps
	if len(b) == 32 {
		if caps&capSSL != 0 {
			p.tls = true // plaintext capture of a TLS session: nothing more to read
		}
		return
	}
	rest := b[32:]
	p.user, rest = cstringTo(rest)
	switch {
	case caps&capLenencAuth != 0:
		n, w := lenenc(rest)
		if w == 0 || uint64(len(rest)-w) < n {
			return
		}
		rest = rest[w+int(n):]
	case caps&capSecureConn != 0:
		if len(rest) == 0 || len(rest) < 1+int(rest[0]) {
			return
		}
		rest = rest[1+int(rest[0]):]
	default:
		_, rest = cstringTo(rest)
	}
	if caps&capConnectWithDB != 0 {
		p.db, _ = cstringTo(rest)
	}
	_ = capPluginAuth
}

// changeUser takes the user and database of a COM_CHANGE_USER (after its
// command byte): user, auth response (length-prefixed with
// CLIENT_SECURE_CONNECTION, else NUL-terminated; skipped, never kept),
// schema.
func (p *myConn) changeUser(b []byte) {
	user, rest := cstringTo(b)
	if p.caps&capSecureConn != 0 {
		if len(rest) == 0 || len(rest) < 1+int(rest[0]) {
			p.user, p.db = user, ""
			return
		}
		rest = rest[1+int(rest[0]):]
	} else {
		_, rest = cstringTo(rest)
	}
	p.user = user
	p.db, _ = cstringTo(rest)
}

func cstringTo(b []byte) (string, []byte) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i]), b[i+1:]
	}
	return string(b), nil
}

// lenenc decodes a length-encoded integer: value and bytes used (0: invalid).
func lenenc(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	switch c := b[0]; {
	case c < 0xfb:
		return uint64(c), 1
	case c == 0xfc && len(b) >= 3:
		return uint64(binary.LittleEndian.Uint16(b[1:])), 3
	case c == 0xfd && len(b) >= 4:
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4
	case c == 0xfe && len(b) >= 9:
		return binary.LittleEndian.Uint64(b[1:]), 9
	}
	return 0, 0
}

func myError(b []byte) string {
	if len(b) < 3 {
		return "ERROR"
	}
	code := binary.LittleEndian.Uint16(b[1:])
	msg := b[3:]
	state := ""
	if len(msg) >= 6 && msg[0] == '#' {
		state, msg = string(msg[1:6]), msg[6:]
	}
	if state != "" {
		return "ERROR " + strconv.Itoa(int(code)) + " (" + state + "): " + string(msg)
	}
	return "ERROR " + strconv.Itoa(int(code)) + ": " + string(msg)
}

// isEOF: an EOF packet (or, with CLIENT_DEPRECATE_EOF, the OK that replaces
// it at the end of rows). A text row starting with 0xfe is a length-encoded
// string of 2^24 bytes or more, so it is never this short.
func isEOF(b []byte) bool { return len(b) > 0 && b[0] == 0xfe && len(b) < 9 }

// eofStatus is the server status of an EOF packet or of an OK packet.
func eofStatus(b []byte) uint16 {
	if b[0] == 0xfe && len(b) == 5 {
		return binary.LittleEndian.Uint16(b[3:]) // EOF: warnings, status
	}
	rest := b[1:]
	for range 2 { // affected rows, last insert id
		_, w := lenenc(rest)
		if w == 0 {
			return 0
		}
		rest = rest[w:]
	}
	if len(rest) < 2 {
		return 0
	}
	return binary.LittleEndian.Uint16(rest)
}

func (p *myConn) backend(out []Query, b []byte, ts uint64, exact bool) []Query {
	if len(b) == 0 {
		return out
	}
	if !p.authed {
		if b[0] == 0x00 {
			p.authed = true
		}
		return out
	}
	if len(p.pending) == 0 {
		p.badBytes += uint64(len(b)) // an answer to nothing we saw
		return out
	}
	c := p.pending[0]
	done := false
	switch c.stage {
	case myFirst:
		switch {
		case b[0] == 0xff:
			c.q.Error, done = myError(b), true
		case b[0] == 0x00 && c.cmd == comStmtPrepare:
			if len(b) < 9 {
				done = true
				break
			}
			p.stmts[binary.LittleEndian.Uint32(b[1:])] = c.text
			cols, params := uint64(binary.LittleEndian.Uint16(b[5:])), uint64(binary.LittleEndian.Uint16(b[7:]))
			c.left = cols + params
			if p.caps&capDeprecateEOF == 0 {
				c.left += b2u(cols > 0) + b2u(params > 0)
			}
			c.stage, done = mySkip, c.left == 0
		case b[0] == 0x00 || isEOF(b):
			if n, w := lenenc(b[1:]); w > 0 && b[0] == 0x00 {
				c.q.tagRows += int64(n)
				c.q.hasTag = true
			}
			done = eofStatus(b)&statusMoreResults == 0
		case b[0] == 0xfb:
			// LOCAL INFILE request: the client sends the file, then OK.
		default:
			n, w := lenenc(b)
			if w == 0 {
				p.badBytes += uint64(len(b))
				return out
			}
			c.left, c.stage = n, myCols
		}
	case mySkip:
		c.left--
		done = c.left == 0
	case myCols:
		if c.left--; c.left == 0 {
			c.stage = myRows
			if p.caps&capDeprecateEOF == 0 {
				c.stage = myColsEOF
			}
		}
	case myColsEOF:
		c.stage = myRows
		if !isEOF(b) {
			return p.backend(out, b, ts, exact) // no EOF after all: a row
		}
	case myRows:
		switch {
		case b[0] == 0xff:
			c.q.Error, done = myError(b), true
		case isEOF(b):
			if eofStatus(b)&statusMoreResults != 0 {
				c.stage = myFirst // another result set follows
			} else {
				done = true
			}
		default:
			c.q.dataRows++
		}
	}
	if !done {
		return out
	}
	p.pending = append(p.pending[:0], p.pending[1:]...)
	if c.report || c.q.Error != "" {
		if !c.report {
			c.q.Query = c.text // a statement that failed to prepare
		}
		out = append(out, finish(&c.q, ts, exact, "mysql", p.pid, p.id, p.user, p.db))
	}
	return out
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// close ends the connection: commands still waiting never got an answer.
func (p *myConn) close(out []Query) []Query {
	for _, c := range p.pending {
		if !c.report {
			continue
		}
		if c.q.Error == "" {
			c.q.Error = "connection closed before the answer"
		}
		out = append(out, finish(&c.q, c.q.startNS, false, "mysql", p.pid, p.id, p.user, p.db))
	}
	p.pending = nil
	return out
}
