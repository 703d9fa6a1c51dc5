package capture

import (
	"time"

	"github.com/cistern-ebpf/cistern/accum"
)

// The record every protocol parser produces (Query) and the plumbing they
// share: the parser interface, the parser per protocol, the batch times a
// parser is fed, which end a connection is, and how a query is finished.

// Query is one statement seen on a connection and its outcome.
type Query struct {
	Time time.Time `json:"ts"`
	PID  uint32    `json:"pid"`
	TID  uint32    `json:"tid"`  // the thread that completed it (wrote or read the answer)
	Comm string    `json:"comm"` // of the thread that opened the connection
	// Side: which end this process is, from the protocol (who sent the
	// query): client or server.
	Side string `json:"side"`
	// Local and Remote: the socket's addresses, ip:port ([ip6]:port);
	// empty when the socket is not known (a TLS object on no socket seen).
	// Both ends of a local connection have the same pair, swapped.
	Local     string `json:"local"`
	Remote    string `json:"remote"`
	Transport string `json:"transport"` // tls or plain
	Library   string `json:"library"`   // openssl, go, or none (plain)
	ConnID    uint64 `json:"conn"`
	Protocol  string `json:"protocol"`
	Query     string `json:"query"`
	// Fingerprint: FNV-1a 64 of the sanitized text (sanitize.go), equal for
	// statements that differ only in their literals.
	Fingerprint Fingerprint `json:"fingerprint"`
	LatencyUS   float64     `json:"latency_us"`
	// LatencyExact: the query's first byte opened its batch and the answer's
	// last byte closed one, so the batch timestamps are the fragments' own.
	// Otherwise LatencyUS is an upper bound (batch granularity).
	LatencyExact bool   `json:"latency_exact"`
	Rows         int64  `json:"rows"`
	Error        string `json:"error"`              // empty: none (always present, as the JSON format promises)
	User         string `json:"user,omitempty"`     // when the connection's start was seen
	Database     string `json:"database,omitempty"` // likewise (MySQL: or COM_INIT_DB, COM_CHANGE_USER)
	// UserUnknown says why User is empty (UserStartedBefore: the
	// connection's start, which names its user, came before the capture).
	UserUnknown string `json:"user_unknown,omitempty"`
	// Unread: not a query but a TLS connection no probe read from its
	// first TLS byte (UnreadReason: no_tls_probe, or start_missed), with
	// the ciphertext bytes it moved while none did.
	Unread        bool   `json:"unread,omitempty"`
	UnreadReason  string `json:"unread_reason,omitempty"`
	BytesSent     uint64 `json:"bytes_sent,omitempty"`
	BytesReceived uint64 `json:"bytes_received,omitempty"`

	startNS  uint64
	startOK  bool
	done     bool // extended: its result is complete
	extended bool
	dataRows int64
	tagRows  int64
	hasTag   bool
}

// UserStartedBefore is Query.UserUnknown of a connection first seen
// mid-stream: its start (PostgreSQL's StartupMessage, MySQL's
// HandshakeResponse) came before the capture.
const UserStartedBefore = "started_before_capture"

// connParser parses one connection's protocol into queries.
type connParser interface {
	// feed parses bytes of one direction that arrived in a batch with
	// times ft and appends the queries they completed to out.
	feed(out []Query, dir accum.Direction, b []byte, ft fragTimes, pid uint32) []Query
	lost()                     // a sequence gap: drop what cannot be parsed any more
	side() string              // SideClient, SideServer, or "" while unknown
	close(out []Query) []Query // the connection ended
	bad() uint64               // bytes skipped as unparseable
}

// newParser makes the parser of protocol for connection id.
func newParser(protocol string, id uint64) connParser {
	switch protocol {
	case "mysql":
		return newMyConn(id)
	case "raw":
		return newRawConn(id)
	}
	return newPGConn(id)
}

// sideOf: the end that writes the frontend's (client's) messages is the client.
func sideOf(known bool, frontDir accum.Direction) string {
	switch {
	case !known:
		return ""
	case frontDir == accum.Write:
		return SideClient
	}
	return SideServer
}

// fragTimes are the timestamps of the bytes handed to a parser (a segment:
// the fragments of one direction in a row): first is exact for its first
// byte when opens, last for its last byte when closes.
type fragTimes struct {
	first, last   uint64
	opens, closes bool
}

// finish is q's record, answered at ts (exact: the answer's last byte
// closed a batch), on connection id of process pid speaking protocol.
func finish(q *Query, ts uint64, exact bool, protocol string, pid uint32, id uint64, user, db string) Query {
	r := *q
	r.LatencyExact = r.startOK && exact
	r.PID, r.ConnID, r.Protocol, r.User, r.Database = pid, id, protocol, user, db
	if user == "" {
		r.UserUnknown = UserStartedBefore
	}
	if ts > r.startNS {
		r.LatencyUS = float64(ts-r.startNS) / 1e3
	}
	r.Rows = r.dataRows
	if r.hasTag && r.dataRows == 0 {
		r.Rows = r.tagRows
	}
	return r
}
