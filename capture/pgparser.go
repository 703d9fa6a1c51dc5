package capture

import "github.com/cistern-ebpf/cistern/accum"

// PGParser parses fragments one by one with the same PostgreSQL parser the
// accumulated capture uses. `cistern bench capture` feeds it the naive
// channel's records (bench/capture/naive), so both agents do the same work
// per query and only the channel differs.
type PGParser struct {
	conns map[uint64]*pgConn
	out   []Query
}

// NewPGParser makes one.
func NewPGParser() *PGParser { return &PGParser{conns: map[uint64]*pgConn{}} }

// Feed parses one fragment of connection conn (the SSL* it belongs to),
// taken at ts (bpf_ktime_get_ns) by pid, and returns the queries it
// completed, in a slice the next call reuses.
func (p *PGParser) Feed(conn uint64, dir accum.Direction, data []byte, ts uint64, pid uint32) []Query {
	c := p.conns[conn]
	if c == nil {
		c = newPGConn(conn)
		p.conns[conn] = c
	}
	p.out = c.feed(p.out[:0], dir, data, fragTimes{first: ts, last: ts, opens: true, closes: true}, pid)
	return p.out
}
