package kcomp

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/internal/testenv"
	cbufsrc "github.com/cistern-ebpf/cistern/lib/cbuf"
)

// The kernel writes exec records into its pool and sends them; a user
// component receives them as cbufs, reads them through a read-only mapping,
// frees them, and the manager hands the pages back to the kernel, so far
// more execs than pages get through.
func TestKernelComponent(t *testing.T) {
	testenv.RequireRoot(t)
	src, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// what components get can never be mapped writable
	fd, err := src.ReadOnlyFd()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := unix.Mmap(fd, 0, Pages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		unix.Munmap(b)
		t.Fatal("the kernel pool handed to components maps writable")
	}
	unix.Close(fd)
	dir := t.TempDir()
	m, err := cbuf.NewManager(cbuf.ManagerOptions{Socket: filepath.Join(dir, "m.sock"), Memory: 16 << 20, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AttachKernel(src); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	c, err := cbuf.ConnectWith(filepath.Join(dir, "m.sock"), cbuf.ClientOptions{Name: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// a marker binary whose path only this test execs
	marker := filepath.Join(dir, "cbuf-kmarker")
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		testenv.Missing(t, "/bin/true", "apt-get install coreutils")
	}
	if err := os.WriteFile(marker, b, 0o755); err != nil {
		t.Fatal(err)
	}
	const runs = 3 * Pages
	go func() {
		for i := 0; i < runs; i++ {
			exec.Command(marker).Run()
		}
	}()
	found, faulted := 0, false
	deadline := time.Now().Add(60 * time.Second * testenv.TimeScale()) // execs crawl under TCG
	for found < runs && time.Now().Before(deadline) {
		id, err := c.KernelRecv(time.Second)
		if err != nil {
			continue
		}
		page, err := c.Buf(id, 4096)
		if err != nil {
			t.Fatalf("kernel buffer %x: %v", id, err)
		}
		n := binary.LittleEndian.Uint32(page[4:])
		if n > 0 && n <= 256 && string(page[24:24+n-1]) == marker {
			found++
		}
		if !faulted {
			faulted = func() (f bool) {
				old := debug.SetPanicOnFault(true)
				defer debug.SetPanicOnFault(old)
				defer func() { f = recover() != nil }()
				page[0] = 1
				return false
			}()
			if !faulted {
				t.Fatal("a user component could write the kernel's buffer")
			}
		}
		c.Free(id)
	}
	s := m.Stats()
	t.Logf("%d of %d marker execs received; kernel: %+v", found, runs, *s.Kernel)
	if uint64(found)+s.Kernel.Drops < runs || found <= Pages {
		t.Fatalf("%d of %d execs arrived (%d dropped for want of a page): pages are not coming back", found, runs, s.Kernel.Drops)
	}
	if s.Kernel.Returned < Pages {
		t.Fatalf("only %d pages went back to the kernel", s.Kernel.Returned)
	}
}

// The C library receives kernel buffers too.
func TestKernelComponentC(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.NeedTool(t, "cc", "gcc")
	dir := t.TempDir()
	src, _ := os.ReadFile("../../lib/cbuf/test/peer.c")
	peer, err := cbufsrc.Build(dir, "peer", map[string][]byte{"peer.c": src})
	if err != nil {
		t.Fatal(err)
	}
	k, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	sock := filepath.Join(dir, "m.sock")
	m, err := cbuf.NewManager(cbuf.ManagerOptions{Socket: sock, Memory: 16 << 20, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.AttachKernel(k)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				exec.Command("/bin/true").Run()
			}
		}
	}()
	// A slow (emulated) guest may exec /bin/true less than once in 2 s.
	wait := strconv.Itoa(int(2000 * testenv.TimeScale()))
	out, err := exec.Command(peer, sock, "krecv", "150", wait).Output()
	if err != nil || string(out) != "kernel ok 150\n" {
		t.Fatalf("C receiver of kernel buffers: %v %q", err, out)
	}
}
