package kernel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// errPhantomUnread is the behaviour probeSockmapSelfRedirect looks for.
var errPhantomUnread = errors.New("a segment redirected to its own socket during the socket's first read stays counted as unread: poll says readable and read returns EAGAIN, so an event-loop server (memcached) spins on the connection")

// probeSockmapSelfRedirect is a behaviour, not a version: on a loopback
// pair, a segment that reached the server socket before it joined the
// sockmap (as one that arrives before memcached's accept does) is
// redirected by an sk_skb verdict to the socket's own egress during the
// socket's first read. tcp_bpf_recvmsg_parser runs that pending verdict
// after saving copied_seq and writes the saved value back when it ends,
// so the advance the redirect made (tcp_eat_skb) is lost and the bytes
// stay counted as unread for the connection's life. Kerby-KV's TCP path
// answers GETs exactly so (docs/kerby-kv.md, "TCP on each kernel").
func probeSockmapSelfRedirect() error { return selfRedirect(true) }

// selfRedirect runs the probe; pending false sends the segment only after
// the socket joined the map (the path every later segment takes).
func selfRedirect(pending bool) error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockMap, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("SOCKMAP maps: %w", err)
	}
	defer m.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SkSKB, AttachType: ebpf.AttachSkSKBVerdict, License: "GPL",
		Instructions: asm.Instructions{
			// bpf_sk_redirect_map(skb, map, 0, 0): to socket 0's egress
			asm.LoadMapPtr(asm.R2, m.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnSkRedirectMap.Call(),
			asm.Return(),
		},
	})
	if err != nil {
		return fmt.Errorf("sk_skb verdict programs: %w", err)
	}
	defer prog.Close()
	attach := link.RawAttachProgramOptions{Target: m.FD(), Program: prog, Attach: ebpf.AttachSkSKBVerdict}
	if err := link.RawAttachProgram(attach); err != nil {
		return fmt.Errorf("sk_skb verdict on a sockmap: %w", err)
	}
	defer link.RawDetachProgram(link.RawDetachProgramOptions{Target: m.FD(), Program: prog, Attach: ebpf.AttachSkSKBVerdict})

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	cli, err := net.DialTimeout("tcp4", ln.Addr().String(), time.Second)
	if err != nil {
		return err
	}
	defer cli.Close()
	msg := []byte("cistern\r\n")
	if pending {
		if _, err := cli.Write(msg); err != nil {
			return err
		}
	}
	srvConn, err := ln.Accept()
	if err != nil {
		return err
	}
	defer srvConn.Close()
	f, err := srvConn.(*net.TCPConn).File() // a blocking-mode copy: reads use MSG_DONTWAIT
	if err != nil {
		return err
	}
	defer f.Close()
	fd := int(f.Fd())
	// The segment is in the receive queue before the socket joins the map.
	if pending {
		if err := waitReadable(fd, time.Second); err != nil {
			return fmt.Errorf("loopback segment: %w", err)
		}
	}
	if err := m.Put(uint32(0), uint32(fd)); err != nil {
		return fmt.Errorf("socket into the sockmap: %w", err)
	}
	defer m.Delete(uint32(0))
	if !pending {
		if _, err := cli.Write(msg); err != nil {
			return err
		}
	}
	buf := make([]byte, 64)
	// The first read runs the verdict on the pending segment.
	if n, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err == nil && n > 0 {
		return fmt.Errorf("the pending segment was read (%d bytes), not redirected: behaviour unknown", n)
	}
	cli.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(cli, got); err != nil {
		return fmt.Errorf("the redirected segment did not come back: %w", err)
	}
	// The advance may follow the reply; give it a moment.
	time.Sleep(50 * time.Millisecond)
	if waitReadable(fd, 0) == nil {
		if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); errors.Is(err, unix.EAGAIN) {
			return fmt.Errorf("%w: %w", ErrMissing, errPhantomUnread)
		}
	}
	return nil
}

// waitReadable polls fd for input up to d.
func waitReadable(fd int, d time.Duration) error {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, int(d.Milliseconds()))
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("not readable")
	}
	return nil
}
