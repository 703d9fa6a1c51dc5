package kv

import (
	"context"
	"fmt"
	"net"
	"time"
)

// NativePeerError refuses native XDP on a veth whose peer runs no XDP
// program: the veth driver would drop every reply sent with XDP_TX (or, with
// only GRO on the peer, lose it without counting it). It is the caller's
// choice of mode that is wrong (the CLI exits with status 2).
type NativePeerError struct {
	Iface string
	Peer  *VethPeer
}

func (e *NativePeerError) Error() string {
	return fmt.Sprintf("--xdp-mode native on %s: its veth peer (%s) runs no XDP program, so the veth driver would drop every reply sent with XDP_TX; use --xdp-mode auto (generic on a veth) or attach an XDP program to the peer first", e.Iface, e.Peer)
}

// CheckNativePeer tells whether native XDP on ifindex (named iface) would
// deliver its XDP_TX replies: nil when it is no veth or its peer runs an
// XDP program, a *NativePeerError when the peer runs none. A peer that
// cannot be read is no error: warn says so, and the drop counters then tell.
func CheckNativePeer(ifindex int, iface string, warn func(string)) error {
	li, err := InspectLink(ifindex)
	if err != nil {
		return err
	}
	p := li.Peer
	switch {
	case p == nil || p.Delivers():
		return nil
	case p.Err == nil:
		return &NativePeerError{Iface: iface, Peer: p}
	default:
		warn(fmt.Sprintf("cannot see whether the veth peer of %s (%s) runs an XDP program (%v); without one, every reply sent with XDP_TX is dropped (watch driver_xdp_tx_errors; --xdp-mode auto avoids it)", iface, p, p.Err))
		return nil
	}
}

// warnEvery is how often WatchDriver repeats one warning.
const warnEvery = 10 * time.Second

// WatchDriver publishes the interface's drop counters for PinnedStats
// (`cistern kv stats`) every second until ctx is done, and warns, at most
// every 10 s each, while XDP_TX replies are being dropped by the driver,
// and while the veth peer that native mode relies on runs no XDP program
// (with only GRO on the peer, the veth loses XDP_TX frames without counting
// them). Run it after Attach and Pin.
func (s *Server) WatchDriver(ctx context.Context, warn func(string)) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var warned uint64
	var lastDrop, lastPeer time.Time
	watchPeer := s.XDPMode == "native" && s.Link.Peer != nil
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if c, err := s.PublishDriverCounters(); err == nil {
			if n := c["driver_xdp_tx_errors"]; n > warned && time.Since(lastDrop) >= warnEvery {
				warn(fmt.Sprintf("%s dropped %d XDP_TX replies so far (driver_xdp_tx_errors): on a veth, the peer must run an XDP program, or restart with --xdp-mode auto", s.Link.Name, n))
				warned, lastDrop = n, time.Now()
			}
		}
		if watchPeer && time.Since(lastPeer) >= warnEvery {
			if li, err := InspectLink(s.Link.Ifindex); err == nil && li.Peer != nil && li.Peer.Err == nil && !li.Peer.Delivers() {
				warn(fmt.Sprintf("the veth peer of %s (%s) no longer runs an XDP program: replies sent with XDP_TX are lost; give it one again, or restart with --xdp-mode auto", s.Link.Name, li.Peer))
				lastPeer = time.Now()
			}
		}
	}
}

// CheckMemcached fails clearly when nothing answers at host:port, the
// memcached Kerby-KV fronts.
func CheckMemcached(host, port string) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(host, port), 2*time.Second)
	if err != nil {
		return fmt.Errorf("memcached at %s:%s does not answer (%v): start it with UDP enabled, e.g. memcached -U %s -p %s", host, port, err, port, port)
	}
	c.Close()
	return nil
}
