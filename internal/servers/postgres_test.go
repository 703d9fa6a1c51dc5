package servers_test

import (
	"net"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestPostgresPortInUse: a port someone else listens on is refused at
// start, naming the port. Before, the readiness checks were answered by
// the other server, our postmaster exited ("could not create any TCP/IP
// sockets"), and the test failed later on a dead pid or "connection
// refused" (the trial: another run's PostgreSQL on 54353).
func TestPostgresPortInUse(t *testing.T) {
	testenv.RequireRoot(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	pg, err := servers.StartPostgres(servers.PostgresOptions{Port: port})
	testenv.NotInstalled(t, err)
	if err == nil {
		pg.Stop()
		t.Fatalf("postgres started on port %d, which another process holds", port)
	}
	if !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("error %q does not say the port is in use", err)
	}
}
