// Package servers starts and stops the real servers Cistern's tests and
// benchmarks talk to (memcached, PostgreSQL), on loopback or inside a
// network namespace.
package servers

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/cistern-ebpf/cistern/internal/netenv"
)

// ErrNotInstalled says a server binary is missing; `make deps` installs it.
var ErrNotInstalled = errors.New("not installed")

// IsNotInstalled tells whether err is ErrNotInstalled.
func IsNotInstalled(err error) bool { return errors.Is(err, ErrNotInstalled) }

// command builds cmd, inside netns nsName when it is set.
func command(nsName, bin string, args ...string) *exec.Cmd {
	var c *exec.Cmd
	if nsName != "" {
		c = netenv.Command(nsName, bin, args...)
	} else {
		c = exec.Command(bin, args...)
	}
	// Own process group: Stop kills the server and not `ip netns exec` alone.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return c
}

// waitTCP dials addr (from inside nsName when set) until it answers.
func waitTCP(nsName, addr string, timeout time.Duration, exited <-chan struct{}) error {
	dial := func() error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		var err error
		if nsName != "" {
			ns, nerr := netns.GetFromName(nsName)
			if nerr != nil {
				return nerr
			}
			err = netenv.Do(ns, dial)
			ns.Close()
		} else {
			err = dial()
		}
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("server exited before listening on %s", addr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %v: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proc is a started server process.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func start(c *exec.Cmd) (*proc, error) {
	if err := c.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: c, exited: make(chan struct{})}
	go func() { _ = c.Wait(); close(p.exited) }()
	return p, nil
}

// stop sends SIGTERM to the process group, then SIGKILL after a grace period.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.exited
	}
}

func lookPath(bin string) (string, error) {
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%s %w: run sudo make deps", bin, ErrNotInstalled)
	}
	return p, nil
}

func logFile(name string) (*os.File, error) {
	return os.CreateTemp("", "cistern-"+name+"-*.log")
}
