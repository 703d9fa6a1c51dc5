package testenv

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/netenv"
)

// MemcachedUDP is a memcached UDP client for tests: each request is one
// datagram behind memcached's 8-byte frame header, and replies are matched
// by request id. It is dialled from the client namespace of a pair, so its
// packets cross the veth that Kerby-KV is attached to.
type MemcachedUDP struct {
	Conn *net.UDPConn
	id   uint16
}

// DialMemcachedUDP connects from pair's client namespace to port on its
// server; the socket closes with the test.
func DialMemcachedUDP(t testing.TB, pair *netenv.Pair, port int) *MemcachedUDP {
	t.Helper()
	var c *net.UDPConn
	if err := netenv.Do(pair.ClientNS, func() (err error) {
		c, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: pair.ServerIP, Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &MemcachedUDP{Conn: c}
}

// ErrNoReply: no datagram with the request's id came back in time.
var ErrNoReply = errors.New("no reply")

// Do sends text and returns its reply, resending up to twice after 300 ms
// (scaled by TimeScale) without one.
func (u *MemcachedUDP) Do(text string) (string, error) {
	req := u.frame(text)
	for try := 0; try < 3; try++ {
		if _, err := u.Conn.Write(req); err != nil {
			return "", err
		}
		if r, err := u.await(300 * time.Millisecond * TimeScale()); err == nil {
			return r, nil
		}
	}
	return "", ErrNoReply
}

// Once sends text once and waits up to wait for its reply: a reply the
// kernel lost is not hidden by a resend.
func (u *MemcachedUDP) Once(text string, wait time.Duration) (string, error) {
	if _, err := u.Conn.Write(u.frame(text)); err != nil {
		return "", err
	}
	return u.await(wait)
}

func (u *MemcachedUDP) frame(text string) []byte {
	u.id++
	req := make([]byte, 8+len(text))
	binary.BigEndian.PutUint16(req[0:], u.id)
	binary.BigEndian.PutUint16(req[4:], 1) // one datagram
	copy(req[8:], text)
	return req
}

// await reads until the reply to the current id (late replies to earlier
// ids are skipped) or the deadline.
func (u *MemcachedUDP) await(wait time.Duration) (string, error) {
	buf := make([]byte, 65536)
	u.Conn.SetReadDeadline(time.Now().Add(wait))
	for {
		n, err := u.Conn.Read(buf)
		if err != nil {
			return "", ErrNoReply
		}
		if n >= 8 && binary.BigEndian.Uint16(buf[0:]) == u.id {
			return string(buf[8:n]), nil
		}
	}
}
