package pagecache

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// onCPU runs f on a thread pinned to cpu.
func onCPU(t *testing.T, cpu int, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Errorf("pin to CPU %d: %v", cpu, err)
		return
	}
	f()
}

// TestConcurrentAddersTrackEachFolioOnce: readers on every CPU bring
// folios of their own files into the page cache at once, so the add
// programs contend for the policy's lock and queue for each other; then
// they drop the files at once (deletes). Every folio added is tracked
// exactly once (the policy's pages equal the files' cached pages, no
// insertion replaced another), and every event is applied or counted as a
// dropped: none is lost or applied twice. Several rounds, so the queue
// wraps.
func TestConcurrentAddersTrackEachFolioOnce(t *testing.T) {
	testenv.RequireRoot(t)
	cpus := runtime.NumCPU()
	dir := filepath.Join(t.TempDir(), "w")
	perCPU := 4
	files := writeFiles(t, dir, cpus*perCPU, 8<<20)
	p, tr := openTracked(t, "fifo", dir)
	settle := func() map[string]uint64 { // the sweep applies what is stranded
		t.Helper()
		var st map[string]uint64
		for i := 0; i < 50; i++ {
			st = pcStats(t, p, tr)
			if st["applied"]+st["events_dropped"] == st["events_add"]+st["events_del"] {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return st
	}
	each := func(f func(path string) error) {
		var wg sync.WaitGroup
		for c := range cpus {
			wg.Add(1)
			go func() {
				defer wg.Done()
				onCPU(t, c, func() {
					for _, path := range files[c*perCPU : (c+1)*perCPU] {
						if err := f(path); err != nil {
							t.Error(err)
						}
					}
				})
			}()
		}
		wg.Wait()
	}
	for round := range 3 {
		each(func(path string) error {
			b, err := os.ReadFile(path)
			if err == nil && len(b) != 8<<20 {
				err = fmt.Errorf("%s: read %d bytes", path, len(b))
			}
			return err
		})
		st := settle()
		var cachedPages uint64
		for _, f := range files {
			cachedPages += cached(t, f)
		}
		t.Logf("round %d after reads: %d pages cached, stats %v", round, cachedPages, st)
		if st["events_add"] == 0 {
			t.Fatalf("round %d: no add seen", round)
		}
		if lost := st["events_add"] + st["events_del"] - st["applied"] - st["events_dropped"]; lost != 0 {
			t.Fatalf("round %d: %d events neither applied nor counted as dropped: %v", round, lost, st)
		}
		if st["readded"] != 0 {
			t.Errorf("round %d: %d folios added twice", round, st["readded"])
		}
		if st["events_dropped"] == 0 && st["tracked_pages"] != cachedPages {
			t.Errorf("round %d: the policy tracks %d pages, the page cache holds %d of the files", round, st["tracked_pages"], cachedPages)
		}
		each(DropFile)
		st = settle()
		t.Logf("round %d after drops: stats %v", round, st)
		if st["events_dropped"] == 0 && (st["tracked_pages"] != 0 || st["removed"] != st["events_del"]) {
			t.Errorf("round %d: %d pages still tracked after every file was dropped; %d of %d deletes removed a tracked folio",
				round, st["tracked_pages"], st["removed"], st["events_del"])
		}
	}
}

// TestAgentKillHelper is the agent TestAgentKilledLeavesKernelDefault
// kills: it prints the cgroup and its programs' ids, then runs until
// killed.
func TestAgentKillHelper(t *testing.T) {
	dir := os.Getenv("CISTERN_TEST_PC_KILL_DIR")
	if dir == "" {
		return // a helper: TestAgentKilledLeavesKernelDefault runs it in a process of its own
	}
	a, err := Start(Config{Dir: dir, Cgroup: os.Getenv("CISTERN_TEST_PC_KILL_CGROUP"), Limit: 16 << 20, Policy: "lru"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range a.pol.coll.Programs {
		if info, err := p.Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids = append(ids, strconv.Itoa(int(id)))
			}
		}
	}
	fmt.Printf("ready %s %s\n", a.Cgroup().Path, strings.Join(ids, ","))
	a.Run(context.Background())
}

// TestAgentKilledLeavesKernelDefault: an agent killed with SIGKILL (in a
// process of its own, its cgroup at 16 MiB) leaves nothing that holds the
// cgroup back: its programs are unloaded with its file descriptors, and a
// reader in the cgroup reads a file 4x the limit to the end, the kernel's
// own reclaim making room.
func TestAgentKilledLeavesKernelDefault(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "w")
	files := writeFiles(t, dir, 1, 64<<20)
	name := fmt.Sprintf("cistern-test-pc-kill-%d", os.Getpid())
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentKillHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "CISTERN_TEST_PC_KILL_DIR="+dir, "CISTERN_TEST_PC_KILL_CGROUP="+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var cgPath string
	var ids []ebpf.ProgramID
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "ready" {
			cgPath = f[1]
			for _, s := range strings.Split(f[2], ",") {
				n, _ := strconv.Atoi(s)
				ids = append(ids, ebpf.ProgramID(n))
			}
			break
		}
	}
	if cgPath == "" {
		t.Fatal("the agent process never became ready")
	}
	defer os.Remove(cgPath) // the killed agent cannot remove it
	go func() {             // drain the helper's output
		for sc.Scan() {
		}
	}()
	cg := &Cgroup{Path: cgPath}
	// The agent works: a first read in the cgroup, evicted as it goes.
	readInCgroup(t, cg, files[0])
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, id := range ids {
		for {
			p, err := ebpf.NewProgramFromID(id)
			if err != nil {
				break
			}
			p.Close()
			if time.Now().After(deadline) {
				t.Fatalf("program %d still loaded %v after the agent was killed", id, time.Since(deadline.Add(-10*time.Second)))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := DropFile(files[0]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rd := exec.CommandContext(ctx, "sh", "-c", `echo $$ > "$0/cgroup.procs" && exec cat "$1" > /dev/null`, cgPath, files[0])
	if b, err := rd.CombinedOutput(); err != nil {
		t.Fatalf("a reader in the cgroup after the agent was killed: %v (%s; 60 s allowed)", err, b)
	}
	if c := cached(t, files[0]); c > 16<<20/4096 {
		t.Errorf("%d pages of the file cached in a 16 MiB cgroup", c)
	}
}
