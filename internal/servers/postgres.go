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

// PostgresOptions configure StartPostgres.
type PostgresOptions struct {
	Port int               // default 54329
	Conf map[string]string // extra postgresql.conf settings (ssl, certificates, …)
	// StartTimeout bounds the wait for the postmaster to listen (default
	// 30 s; an emulated kernel-matrix guest may need more).
	StartTimeout time.Duration
}

// Postgres is a throwaway PostgreSQL cluster on 127.0.0.1, run as the
// postgres user with trust authentication on loopback.
type Postgres struct {
	Opt     PostgresOptions
	Dir     string // data directory
	Socket  string // Unix socket directory
	p       *proc
	binDir  string
	logPath string
}

// Addr is host:port of the server.
func (pg *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Opt.Port)) }

// Bin returns the path of one of the server's tools (psql, pgbench, …).
func (pg *Postgres) Bin(name string) string {
	if p := filepath.Join(pg.binDir, name); fileExists(p) {
		return p
	}
	return name
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func postgresBinDir() (string, error) {
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(m) == 0 {
		return "", fmt.Errorf("postgresql %w: run sudo make deps", ErrNotInstalled)
	}
	return filepath.Dir(m[len(m)-1]), nil
}

// StartPostgres initialises a cluster in a temporary directory and starts it.
func StartPostgres(opt PostgresOptions) (*Postgres, error) {
	binDir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	if opt.Port == 0 {
		opt.Port = 54329
	}
	// A port another server holds would be answered by that server (the
	// waits below would pass and our postmaster exit with "could not
	// create any TCP/IP sockets"): refuse at once, naming the port.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(opt.Port)), time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("postgres: port %d on 127.0.0.1 is already in use by another process (another test run on this machine?)", opt.Port)
	}
	dir, err := os.MkdirTemp("", "cistern-pg-")
	if err != nil {
		return nil, err
	}
	pg := &Postgres{Opt: opt, Dir: filepath.Join(dir, "data"), Socket: dir, binDir: binDir, logPath: filepath.Join(dir, "log")}
	fail := func(err error) (*Postgres, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	// PostgreSQL refuses to run as root: the tree belongs to postgres.
	if out, err := exec.Command("chown", "-R", "postgres:postgres", dir).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("chown: %v: %s", err, out))
	}
	initdb := exec.Command("runuser", "-u", "postgres", "--", filepath.Join(binDir, "initdb"),
		"-D", pg.Dir, "-A", "trust", "-U", "postgres", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v: %s", err, out))
	}
	args := []string{"-u", "postgres", "--", filepath.Join(binDir, "postgres"), "-D", pg.Dir,
		"-p", strconv.Itoa(opt.Port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"}
	for k, v := range opt.Conf {
		args = append(args, "-c", k+"="+v)
	}
	// In an emulated guest a TLS handshake beside 15 others can outlast the
	// default 60 s authentication_timeout, after which the backend exits
	// without a word and psql reports EOF in the handshake (the churn bench
	// on 6.1): give it the most PostgreSQL allows.
	if _, set := opt.Conf["authentication_timeout"]; !set && vm.InGuest() {
		args = append(args, "-c", "authentication_timeout=600s")
	}
	lf, err := os.Create(pg.logPath)
	if err != nil {
		return fail(err)
	}
	defer lf.Close()
	c := command("", "runuser", args...)
	c.Stdout, c.Stderr = lf, lf
	if pg.p, err = start(c); err != nil {
		return fail(err)
	}
	wait := opt.StartTimeout
	if wait <= 0 {
		wait = 30 * time.Second
		if vm.InGuest() { // an emulated guest (testenv.TimeScale)
			wait *= 10
		}
	}
	if err := waitTCP("", pg.Addr(), wait, pg.p.exited); err != nil {
		pg.p.stop()
		out, _ := os.ReadFile(pg.logPath)
		return fail(fmt.Errorf("%w\n%s", err, out))
	}
	// Listening is not accepting: "the database system is starting up".
	// Asked on our own Unix socket (in our private directory): only our
	// postmaster answers there, and it exits when it cannot bind the TCP
	// port, so a server of someone else's on the port is never taken for ours.
	for deadline := time.Now().Add(wait); ; { // the same bound: a guest's start-up is as slow as its listen
		if exec.Command(pg.Bin("pg_isready"), "-q", "-h", dir, "-p", strconv.Itoa(opt.Port)).Run() == nil {
			break
		}
		if time.Now().After(deadline) {
			pg.p.stop()
			out, _ := os.ReadFile(pg.logPath)
			return fail(fmt.Errorf("postgres listens but does not accept connections\n%s", out))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return pg, nil
}

// PID is the postmaster's process id (from postmaster.pid): the parent of
// every backend, which runuser, the process started, is not.
func (pg *Postgres) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(pg.Dir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// Psql runs one SQL statement through psql over TCP and returns its output.
func (pg *Postgres) Psql(sql string) (string, error) {
	out, err := exec.Command(pg.Bin("psql"), "-X", "-A", "-t", "-h", "127.0.0.1", "-p", strconv.Itoa(pg.Opt.Port),
		"-U", "postgres", "-c", sql).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql: %v: %s", err, out)
	}
	return string(out), nil
}

// Log is the server's log so far (why it refused or exited).
func (pg *Postgres) Log() string {
	b, _ := os.ReadFile(pg.logPath)
	return string(b)
}

// Stop shuts the server down and removes its files.
func (pg *Postgres) Stop() {
	pg.p.stop()
	os.RemoveAll(pg.Socket)
}
