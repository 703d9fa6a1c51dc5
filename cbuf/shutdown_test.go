package cbuf

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestRunStopsPolicyBeforeUnmap: Run unmaps the directory and the
// components' metadata when it returns; a policy tick taken after that
// read unmapped memory and killed the process (SIGSEGV in reapOrphans, seen
// in a 6.1 guest). A fast policy loop and an orphan (a departed
// component's buffer still held by its receiver) make a late tick likely
// on every stop; 100 stops must all be clean.
func TestRunStopsPolicyBeforeUnmap(t *testing.T) {
	dir := t.TempDir()
	for i := range 100 {
		sock := filepath.Join(dir, "cbuf.sock")
		m, err := NewManager(ManagerOptions{Socket: sock, Memory: 1 << 20, Pool: 16 * PageSize, Interval: 20 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		a, err := ConnectWith(sock, ClientOptions{Name: "a"})
		if err != nil {
			cancel()
			t.Fatalf("stop %d: connect: %v", i, err)
		}
		b, err := ConnectWith(sock, ClientOptions{Name: "b"})
		if err != nil {
			cancel()
			t.Fatalf("stop %d: connect: %v", i, err)
		}
		_, id, err := a.Alloc(PageSize)
		if err != nil {
			t.Fatalf("stop %d: alloc: %v", i, err)
		}
		a.Send(id)
		if _, err := b.Buf(id, PageSize); err != nil {
			t.Fatalf("stop %d: receive: %v", i, err)
		}
		a.Close() // its buffer, held by b, is an orphan the policy loop reaps
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("stop %d: Run: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("stop %d: Run did not return", i)
		}
		time.Sleep(time.Millisecond) // a late tick would fault here
		b.Close()
	}
}
