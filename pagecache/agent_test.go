package pagecache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// writeFiles writes n files of size bytes under dir, on disk and out of
// the page cache.
func writeFiles(t *testing.T, dir string, n int, size int) []string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	var paths []string
	for i := range n {
		for j := range buf {
			buf[j] = byte(rand.Uint32())
		}
		p := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	unix.Sync()
	for _, p := range paths {
		if err := DropFile(p); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

// cached is how many pages of path are in the page cache (cachestat).
func cached(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0); err != nil {
		t.Fatal(err)
	}
	return cs.Cache
}

// readInCgroup reads files in order with cat, from inside cgroup cg.
func readInCgroup(t *testing.T, cg *Cgroup, files ...string) {
	t.Helper()
	args := append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec cat "$@" > /dev/null`, cg.Path}, files...)
	if out, err := exec.Command("sh", args...).CombinedOutput(); err != nil {
		t.Fatalf("read in cgroup: %v: %s", err, out)
	}
}

// TestAgentEvictsMRUCandidates reads 64 MiB of files once, in order, inside
// a 32 MiB cgroup with the MRU agent. MRU's victims are the folios added
// last, so the first files stay cached and the later ones go: the
// opposite of the kernel's own LRU. A file outside the directory, read
// first in the same cgroup, is never touched. Stopping the agent detaches
// its programs and removes the cgroup.
func TestAgentEvictsMRUCandidates(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	files := writeFiles(t, filepath.Join(base, "watched"), 64, 1<<20)
	outside := writeFiles(t, filepath.Join(base, "outside"), 1, 4<<20)[0]

	name := fmt.Sprintf("cistern-test-pc-%d", os.Getpid())
	a, err := Start(Config{Dir: filepath.Join(base, "watched"), Cgroup: name, Limit: 32 << 20, Policy: "mru"})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			a.Close()
		}
	}()
	if a.Files() != 64 {
		t.Fatalf("watching %d files, want 64", a.Files())
	}
	cgPath := a.Cgroup().Path
	progID, _ := a.tr.coll.Programs["pc_add"].Info()
	id, _ := progID.ID()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	readInCgroup(t, a.Cgroup(), append([]string{outside}, files...)...)
	time.Sleep(100 * time.Millisecond) // let the agent drain the ring buffer
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, err := a.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %v", st)

	var first, last uint64
	for i, f := range files {
		c := cached(t, f)
		if i < 12 {
			first += c
		}
		if i >= 32 && i < 63 {
			last += c
		}
	}
	if first != 12*256 {
		t.Errorf("files 0-11: %d of %d pages cached: MRU keeps the first files", first, 12*256)
	}
	if last > 31*256/4 {
		t.Errorf("files 32-62: %d of %d pages cached: MRU evicts the latest folios", last, 31*256)
	}
	if c := cached(t, outside); c != 1024 {
		t.Errorf("outside file: %d of 1024 pages cached: it must not be touched", c)
	}
	if st["victims"] == 0 || st["pages_evicted"] < 16*256 {
		t.Errorf("agent evicted %d pages in %d victims", st["pages_evicted"], st["victims"])
	}
	for _, k := range []string{"not_evicted_open_failed", "not_evicted_fadvise_failed", "events_dropped", "policy_fallbacks"} {
		if st[k] != 0 {
			t.Errorf("%s = %d", k, st[k])
		}
	}
	if st["events_add"] < 64*256/16 || st["removed"]+st["del_unknown"] == 0 {
		t.Errorf("tracker saw too little: %v", st)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat(cgPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s still there after Close: %v", cgPath, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			break
		}
		p.Close()
		if time.Now().After(deadline) {
			t.Fatalf("program pc_add (id %d) still loaded after Close", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
