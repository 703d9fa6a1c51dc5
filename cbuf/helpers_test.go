package cbuf

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestMain(m *testing.M) {
	if h := os.Getenv("CBUF_TEST_HELPER"); h != "" {
		os.Exit(runHelper(h))
	}
	code := m.Run()
	if nobodyDir != "" {
		os.RemoveAll(nobodyDir)
	}
	if peerPath != "" {
		os.RemoveAll(filepath.Dir(peerPath)) // the C peer built for this run
	}
	os.Exit(code)
}

// startManager runs a manager in this process on a socket in a temp dir.
func startManager(t *testing.T, opt ManagerOptions) (*Manager, string) {
	t.Helper()
	opt.Socket = filepath.Join(t.TempDir(), "cbuf.sock")
	if opt.Memory == 0 {
		opt.Memory = 16 << 20
	}
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return m, opt.Socket
}

var (
	peerOnce sync.Once
	peerPath string
	peerErr  error
)

// buildPeer compiles libcbuf and the C test peer with the system compiler.
func buildPeer(t *testing.T) string {
	t.Helper()
	cc := testenv.NeedTool(t, "cc", "gcc")
	peerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cbuf-peer")
		if err != nil {
			peerErr = err
			return
		}
		peerPath = filepath.Join(dir, "peer")
		out, err := exec.Command(cc, "-O2", "-g", "-Wall", "-I../lib/cbuf/include", "../lib/cbuf/src/cbuf.c", "../lib/cbuf/src/agg.c",
			"../lib/cbuf/test/peer.c", "-o", peerPath, "-lpthread").CombinedOutput()
		if err != nil {
			peerErr = fmt.Errorf("build C peer: %v\n%s", err, out)
		}
	})
	if peerErr != nil {
		t.Fatal(peerErr)
	}
	return peerPath
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fill(b []byte, nonce uint64) {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
	for i := range w {
		w[i] = nonce ^ uint64(i)
	}
}

func check(b []byte, nonce uint64) bool {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
	for i := range w {
		if w[i] != nonce^uint64(i) {
			return false
		}
	}
	return true
}
