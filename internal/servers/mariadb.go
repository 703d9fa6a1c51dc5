package servers

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cistern-ebpf/cistern/internal/vm"
)

// MariaDBOptions configure StartMariaDB.
type MariaDBOptions struct {
	Port int      // default 53306
	TLS  *TLSCert // serve TLS with this certificate (nil: plaintext only)
}

// MariaDB is a throwaway MariaDB server on 127.0.0.1 with its own data
// directory, run as the mysql user; root logs in without a password over
// TCP from loopback.
type MariaDB struct {
	Opt    MariaDBOptions
	Dir    string // data directory
	Socket string
	p      *proc
	tmp    string
}

// Addr is host:port of the server.
func (m *MariaDB) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Opt.Port)) }

// PID is mariadbd's process id (runuser, the process started, is its parent).
func (m *MariaDB) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(m.tmp, "mariadbd.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// StartMariaDB initialises a data directory in a temporary directory and
// starts mariadbd on it.
func StartMariaDB(opt MariaDBOptions) (*MariaDB, error) {
	server, err := lookPath("mariadbd")
	if err != nil {
		return nil, fmt.Errorf("mariadb-server %w: run sudo make deps", ErrNotInstalled)
	}
	install, err := lookPath("mariadb-install-db")
	if err != nil {
		return nil, fmt.Errorf("mariadb-server %w: run sudo make deps", ErrNotInstalled)
	}
	if opt.Port == 0 {
		opt.Port = 53306
	}
	tmp, err := os.MkdirTemp("", "cistern-mariadb-")
	if err != nil {
		return nil, err
	}
	m := &MariaDB{Opt: opt, Dir: filepath.Join(tmp, "data"), Socket: filepath.Join(tmp, "mysqld.sock"), tmp: tmp}
	fail := func(err error) (*MariaDB, error) { os.RemoveAll(tmp); return nil, err }
	args := []string{"--no-defaults", "--datadir=" + m.Dir, "--socket=" + m.Socket, "--port=" + strconv.Itoa(opt.Port),
		"--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin", "--innodb-buffer-pool-size=16M",
		"--innodb-log-file-size=8M", "--pid-file=" + filepath.Join(tmp, "mariadbd.pid"), "--log-error=" + filepath.Join(tmp, "log")}
	// In an emulated guest a TLS handshake beside others can outlast
	// connect_timeout's 10 s: the server then resets the connection
	// (mysql2 saw ECONNRESET in a 6.1 guest), as PostgreSQL's
	// authentication_timeout ends a backend.
	if vm.InGuest() {
		args = append(args, "--connect-timeout=600")
	}
	if opt.TLS != nil {
		// The server runs as mysql: it gets its own copy of the key.
		for _, f := range []string{opt.TLS.Cert, opt.TLS.Key} {
			b, err := os.ReadFile(f)
			if err != nil {
				return fail(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, filepath.Base(f)), b, 0o600); err != nil {
				return fail(err)
			}
		}
		// The self-signed certificate is its own CA: clients presenting it
		// (sysbench always presents one) verify.
		crt := filepath.Join(tmp, filepath.Base(opt.TLS.Cert))
		args = append(args, "--ssl-cert="+crt, "--ssl-ca="+crt, "--ssl-key="+filepath.Join(tmp, filepath.Base(opt.TLS.Key)))
	}
	if out, err := exec.Command("chown", "-R", "mysql:mysql", tmp).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("chown: %v: %s", err, out))
	}
	initArgs := []string{"--no-defaults", "--datadir=" + m.Dir, "--user=mysql", "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve"}
	if out, err := exec.Command(install, initArgs...).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("mariadb-install-db: %v: %s", err, out))
	}
	lf, err := os.Create(filepath.Join(tmp, "stdout"))
	if err != nil {
		return fail(err)
	}
	defer lf.Close()
	c := command("", "runuser", append([]string{"-u", "mysql", "--", server}, args...)...)
	c.Stdout, c.Stderr = lf, lf
	if m.p, err = start(c); err != nil {
		return fail(err)
	}
	if err := waitTCP("", m.Addr(), 60*time.Second, m.p.exited); err != nil {
		m.p.stop()
		out, _ := os.ReadFile(filepath.Join(tmp, "log"))
		return fail(fmt.Errorf("%w\n%s", err, out))
	}
	// root@localhost only: let root in over TCP from 127.0.0.1, passwordless.
	if out, err := m.Client("CREATE USER IF NOT EXISTS root@'127.0.0.1'; GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;"); err != nil {
		m.Stop()
		return nil, fmt.Errorf("mariadb: grant: %v: %s", err, out)
	}
	return m, nil
}

// Client runs the mariadb client as root over the Unix socket with sql on
// its standard input.
func (m *MariaDB) Client(sql string) (string, error) {
	bin, err := lookPath("mariadb")
	if err != nil {
		return "", fmt.Errorf("mariadb client %w: run sudo make deps", ErrNotInstalled)
	}
	c := exec.Command(bin, "--no-defaults", "-u", "root", "--socket="+m.Socket)
	c.Stdin = strings.NewReader(sql)
	out, err := c.CombinedOutput()
	return string(out), err
}

// Stop shuts the server down and removes its files.
func (m *MariaDB) Stop() {
	m.p.stop()
	os.RemoveAll(m.tmp)
}
