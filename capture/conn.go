package capture

import (
	"net/netip"
)

// Values of struct cap_conn_info (bpf/capture/conn.bpf.h).
const (
	trTLS        = 1
	trPlain      = 2
	libNone      = 0
	libSSL       = 1
	libGo        = 2
	libSSLStatic = 3
	libBoring    = 4
)

// connState is what the agent keeps of one connection: its parser and, once
// the kernel has told it, who and where it is.
type connState struct {
	p         connParser
	known     bool // info read with the socket's addresses
	tries     int
	comm      string
	local     string
	remote    string
	transport string
	library   string
}

// lookupConn reads connection id's info (comm, transport, addresses) from
// cap_info. A TLS connection may learn its socket after its first bytes
// (a Go server reads before it writes): looked up again, for a while.
func (c *Capture) lookupConn(id uint64, cs *connState) {
	var in capCapConnInfo
	if cs.tries >= 64 {
		return
	}
	cs.tries++
	if err := c.objs.CapInfo.Lookup(id, &in); err != nil {
		return
	}
	cs.comm = cString(in.Comm[:])
	switch in.Transport {
	case trTLS:
		cs.transport = TransportTLS
	case trPlain:
		cs.transport = TransportPlain
	}
	switch in.Library {
	case libSSL:
		cs.library = LibOpenSSL
	case libGo:
		cs.library = LibGo
	case libSSLStatic:
		cs.library = LibOpenSSLStatic
	case libBoring:
		cs.library = LibBoringSSL
	default:
		cs.library = LibNone
	}
	if in.A.Family != 0 {
		cs.local = sockAddr(in.A.Family, in.A.Laddr, in.A.Lport)
		cs.remote = sockAddr(in.A.Family, in.A.Raddr, in.A.Rport)
		cs.known = true
	}
}

// fill sets q's connection fields.
func (cs *connState) fill(q *Query) {
	q.Comm, q.Local, q.Remote, q.Transport, q.Library = cs.comm, cs.local, cs.remote, cs.transport, cs.library
}

func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// sockAddr is "ip:port" ("[ip6]:port"); an IPv4-mapped IPv6 address shows
// as IPv4, as the other end of the connection sees it.
func sockAddr(family uint16, a [16]uint8, port uint16) string {
	var ip netip.Addr
	if family == 2 {
		ip = netip.AddrFrom4([4]byte(a[:4]))
	} else {
		ip = netip.AddrFrom16(a).Unmap()
	}
	return netip.AddrPortFrom(ip, port).String()
}
