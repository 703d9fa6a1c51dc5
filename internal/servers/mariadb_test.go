package servers_test

import (
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestMariaDBTLS starts MariaDB with a certificate and checks that it
// serves TLS.
func TestMariaDBTLS(t *testing.T) {
	testenv.RequireRoot(t)
	tc, err := servers.NewTLSCert()
	if testenv.NotInstalled(t, err); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Remove)
	m, err := servers.StartMariaDB(servers.MariaDBOptions{Port: 53307, TLS: tc})
	if testenv.NotInstalled(t, err); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	out, err := m.Client("SHOW VARIABLES LIKE 'have_ssl';")
	if err != nil || !strings.Contains(out, "YES") {
		t.Fatalf("have_ssl: %v: %s", err, out)
	}
}
