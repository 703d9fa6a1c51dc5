package servers

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// MemcachedOptions configure StartMemcached.
type MemcachedOptions struct {
	Netns    string // network namespace name; "" runs in the current one
	Addr     string // listen address; default 127.0.0.1
	Port     int    // TCP and UDP port; default 11211
	Threads  int    // worker threads; default 2
	MemoryMB int    // cache size; default 256
	// StartTimeout bounds the wait for it to listen (default 10 s; tests
	// widen it in emulated guests and under load: testenv.StartTimeout).
	StartTimeout time.Duration
}

// Memcached is a running memcached with TCP and UDP enabled.
type Memcached struct {
	Opt MemcachedOptions
	p   *proc
	log string
}

// Addr is host:port of the server.
func (m *Memcached) Addr() string { return net.JoinHostPort(m.Opt.Addr, strconv.Itoa(m.Opt.Port)) }

// Log is the path of the server's output.
func (m *Memcached) Log() string { return m.log }

// StartMemcached runs memcached and waits until it accepts connections.
func StartMemcached(opt MemcachedOptions) (*Memcached, error) {
	bin, err := lookPath("memcached")
	if err != nil {
		return nil, err
	}
	if opt.Addr == "" {
		opt.Addr = "127.0.0.1"
	}
	if opt.Port == 0 {
		opt.Port = 11211
	}
	if opt.Threads == 0 {
		opt.Threads = 2
	}
	if opt.MemoryMB == 0 {
		opt.MemoryMB = 256
	}
	lf, err := logFile("memcached")
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	port := strconv.Itoa(opt.Port)
	c := command(opt.Netns, bin, "-u", "root", "-l", opt.Addr, "-p", port, "-U", port,
		"-t", strconv.Itoa(opt.Threads), "-m", strconv.Itoa(opt.MemoryMB), "-c", "4096")
	c.Stdout, c.Stderr = lf, lf
	p, err := start(c)
	if err != nil {
		return nil, fmt.Errorf("start memcached: %w", err)
	}
	m := &Memcached{Opt: opt, p: p, log: lf.Name()}
	wait := opt.StartTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if err := waitTCP(opt.Netns, m.Addr(), wait, p.exited); err != nil {
		p.stop()
		out, _ := os.ReadFile(lf.Name())
		return nil, fmt.Errorf("memcached: %w\n%s", err, out)
	}
	return m, nil
}

// Stop terminates memcached.
func (m *Memcached) Stop() {
	m.p.stop()
	os.Remove(m.log)
}

// Pid is memcached's process id (ip netns exec execs it in place).
func (m *Memcached) Pid() int { return m.p.cmd.Process.Pid }
