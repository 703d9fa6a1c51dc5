package servers_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/netenv"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestMemcachedInNamespace starts memcached in a server namespace and talks
// to it over TCP from the client namespace across the veth.
func TestMemcachedInNamespace(t *testing.T) {
	pair := testenv.NetPair(t, "srvmc")
	m := testenv.Memcached(t, servers.MemcachedOptions{Netns: pair.ServerNSName(), Addr: pair.ServerIP.String(), Port: 11311})
	err := netenv.Do(pair.ClientNS, func() error {
		c, err := net.DialTimeout("tcp", m.Addr(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintf(c, "set k 0 0 5\r\nhello\r\nget k\r\n")
		r := bufio.NewReader(c)
		var got []string
		for len(got) < 4 {
			line, err := r.ReadString('\n')
			if err != nil {
				return err
			}
			got = append(got, strings.TrimSpace(line))
		}
		want := []string{"STORED", "VALUE k 0 5", "hello", "END"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			return fmt.Errorf("got %q, want %q", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPostgres(t *testing.T) {
	testenv.RequireRoot(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54391})
	out, err := pg.Psql("select 40 + 2")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "42" {
		t.Fatalf("select 40+2 = %q", out)
	}
}
