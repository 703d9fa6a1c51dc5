package kv

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// readReply reads one reply to a get: VALUE blocks until END.
func readReply(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return b.String(), err
		}
		b.WriteString(line)
		if line == "END\r\n" || !strings.HasPrefix(line, "VALUE ") {
			return b.String(), nil
		}
		var key string
		var flags, n int
		if _, err := fmt.Sscanf(line, "VALUE %s %d %d", &key, &flags, &n); err != nil {
			return b.String(), fmt.Errorf("bad VALUE line %q: %v", line, err)
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(r, data); err != nil {
			return b.String(), err
		}
		b.Write(data)
	}
}

func (t *tcpClient) get(text string) (string, error) {
	t.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := t.c.Write([]byte(text)); err != nil {
		return "", err
	}
	return readReply(t.r)
}

// TestTCPGetServedInKernel: a GET on memcached's TCP connection misses,
// memcached's reply fills the pool, and the next GET is answered in the
// kernel with the same bytes; a TCP write invalidates it before memcached
// answers.
func TestTCPGetServedInKernel(t *testing.T) {
	e := newKVEnv(t, "kvtcp", Config{})
	if e.srv.TCPMode != "sockmap" {
		t.Fatalf("TCP path: %s", e.srv.TCPMode)
	}
	c := e.tcp(t)
	mustReply(t, must(c.cmd("set k 5 0 5\r\nhello\r\n")), nil, "STORED\r\n")
	mustReply(t, must(c.cmd("set k2 0 0 3\r\nabc\r\n")), nil, "STORED\r\n")
	time.Sleep(60 * time.Millisecond) // the fill quarantine after a write
	want := "VALUE k 5 5\r\nhello\r\nEND\r\n"
	mustReply(t, must(c.get("get k\r\n")), nil, want)
	mustReply(t, must(c.get("get k2\r\n")), nil, "VALUE k2 0 3\r\nabc\r\nEND\r\n")
	hits0 := e.counter(t, "tcp_hits")
	for i := 0; i < 5; i++ {
		mustReply(t, must(c.get("get k\r\n")), nil, want)
	}
	mustReply(t, must(c.get("get k k2\r\n")), nil, want[:len(want)-5]+"VALUE k2 0 3\r\nabc\r\nEND\r\n")
	c2, _ := e.srv.Counters()
	t.Logf("counters: %v", c2)
	if got := e.counter(t, "tcp_hits") - hits0; got < 6 {
		t.Fatalf("tcp_hits went up by %d, want 6", got)
	}
	mustReply(t, must(c.cmd("set k 0 0 2\r\nhi\r\n")), nil, "STORED\r\n")
	mustReply(t, must(c.get("get k\r\n")), nil, "VALUE k 0 2\r\nhi\r\nEND\r\n")
}
