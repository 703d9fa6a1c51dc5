package pagecache

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

// TestAgentSeedsWarmCache starts a FIFO agent on a cgroup whose cache is
// already warm: 16 MiB of files read in the cgroup, and 4 MiB of another
// file read outside it (charged to the test's cgroup). The agent is told
// the cgroup's pages, not the other one's, and FIFO evicts the seeded
// pages first when new files are read: without the seed it would know
// only the new pages, and the warm ones would stay cached for good.
func TestAgentSeedsWarmCache(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "w")
	warm := writeFiles(t, filepath.Join(dir, "warm"), 16, 1<<20)
	outside := writeFiles(t, filepath.Join(dir, "outside"), 1, 4<<20)
	fresh := writeFiles(t, filepath.Join(dir, "new"), 32, 1<<20)
	cg, err := OpenCgroup(fmt.Sprintf("cistern-test-seed-%d", os.Getpid()), 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	readInCgroup(t, cg, warm...)
	if out, err := exec.Command("cat", outside[0]).Output(); err != nil || len(out) != 4<<20 {
		t.Fatalf("read outside: %v", err)
	}
	warmBefore := cachedAll(t, warm)
	a, stop := startAgent(t, Config{Dir: dir, Cgroup: cg.Path, Policy: "fifo", Headroom: 8 << 20})
	defer stop()
	st, err := a.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warm pages cached %d; seeded %d, foreign %d, failed %d (%v)", warmBefore, st["seeded_pages"], st["seed_foreign_pages"], st["seed_failed"], a.SeedError())
	if a.SeedError() != nil || st["seeded_pages"] < warmBefore*9/10 || st["seeded_pages"] > warmBefore {
		t.Fatalf("seeded %d pages of %d cached in the cgroup (error %v)", st["seeded_pages"], warmBefore, a.SeedError())
	}
	if st["seeded_files"] == 0 || st["seeded_files"] > st["seeded_pages"] {
		t.Fatalf("seeded %d pages of %d files: want the files that had pages counted", st["seeded_pages"], st["seeded_files"])
	}
	if c := cached(t, outside[0]); st["seed_foreign_pages"] < c*9/10 {
		t.Fatalf("%d pages of the file read outside are cached, %d counted as another cgroup's", c, st["seed_foreign_pages"])
	}
	readInCgroup(t, cg, fresh...)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	warmAfter := cachedAll(t, warm)
	st, _ = a.Stats()
	t.Logf("after 32 MiB of new files: warm pages cached %d, evicted by the agent %d, limit reclaims %d", warmAfter, st["pages_evicted"], st["cgroup_limit_hits"])
	if warmAfter > warmBefore/4 {
		t.Fatalf("FIFO left %d of %d warm pages cached: the seeded pages were not evicted first", warmAfter, warmBefore)
	}
	if c := cached(t, outside[0]); c < 1000 {
		t.Fatalf("the file read outside the cgroup lost its pages (%d cached): the agent evicted another cgroup's pages", c)
	}
}

// TestAgentSeedsTheKernelsHistory: an agent started over a warm cache
// learns from the kernel's page flags which pages were read again: 8 MiB
// of files read three times in the cgroup (active) and 8 MiB read once
// (referenced), the hot ones first in the directory's order. An LRU agent
// queues them in the kernel's order: when 14 MiB of new files are read,
// the once-read pages go first. Seeded in file order, as before, the hot
// pages went first.
func TestAgentSeedsTheKernelsHistory(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "h")
	hot := writeFiles(t, filepath.Join(dir, "a-hot"), 8, 1<<20)
	cold := writeFiles(t, filepath.Join(dir, "b-cold"), 8, 1<<20)
	// 14 MiB: 6 MiB over the agent's high watermark (24 MiB), so that it
	// evicts well over the 4 MiB of once-read pages' half and well under
	// all of them and the hot ones (with 12 MiB the overflow was 992-1277
	// pages from run to run, around the 1,024 the test needs).
	fresh := writeFiles(t, filepath.Join(dir, "c-new"), 14, 1<<20)
	cg, err := OpenCgroup(fmt.Sprintf("cistern-test-heat-%d", os.Getpid()), 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	for i := 0; i < 3; i++ {
		readInCgroup(t, cg, hot...)
	}
	readInCgroup(t, cg, cold...)
	a, stop := startAgent(t, Config{Dir: dir, Cgroup: cg.Path, Policy: "lru", Headroom: 8 << 20})
	defer stop()
	st, err := a.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d pages: %d active, %d referenced", st["seeded_pages"], st["seeded_active_pages"], st["seeded_referenced_pages"])
	if r := kernel.PageReclaim(); r.MGLRU {
		// MGLRU keeps generations, not an active list: the page flags
		// show every page read referenced and none active (the 6.12
		// guests: 0 and 4,096), so the seed has no order to give and
		// reports one read for each, in the directory's order.
		if st["seeded_active_pages"] != 0 || st["seeded_referenced_pages"] < 4096*3/4 {
			t.Fatalf("%s: %d pages seeded active, %d referenced: want none and about the 4096 read", r.Detail, st["seeded_active_pages"], st["seeded_referenced_pages"])
		}
		return
	}
	if st["seeded_active_pages"] < 2048*3/4 || st["seeded_active_pages"] > 2048+64 {
		t.Fatalf("%d pages seeded active, want about the 2048 of the files read three times", st["seeded_active_pages"])
	}
	readInCgroup(t, cg, fresh...)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var hotAfter, coldAfter uint64
	for _, f := range hot {
		hotAfter += cached(t, f)
	}
	for _, f := range cold {
		coldAfter += cached(t, f)
	}
	st, _ = a.Stats()
	t.Logf("after 14 MiB of new files: hot pages cached %d of 2048, once-read %d; evicted by the agent %d, limit reclaims %d", hotAfter, coldAfter, st["pages_evicted"], st["cgroup_limit_hits"])
	if st["pages_evicted"] < 1024 {
		t.Fatalf("the agent evicted %d pages: the test did not fill the cgroup", st["pages_evicted"])
	}
	// The order: the once-read pages go before any hot one. Where the
	// agent fell behind (a 6.1 TCG guest in CI: 1,786 hot pages kept and
	// none of the once-read), it took more than the once-read pages, and
	// then hot ones, in order; a hot page gone while once-read ones stay
	// is the seed's order lost.
	if coldAfter > hotAfter/2 || (hotAfter < 2048*9/10 && coldAfter > 0) || hotAfter < 2048/2 {
		t.Fatalf("LRU kept %d of the 2048 pages read three times and %d of the 2048 read once: the seed lost the kernel's order", hotAfter, coldAfter)
	}
}

// TestAgentSeedsEveryPage: a seed larger than the policy's event queue
// (48k pages of 8 MiB files, the queue 8192 events) reaches the policy
// whole, made in Start or in the background while the agent runs (auto's
// switches). pc_apply queued the agent's batch of 4096 and applied 3072 a
// call, and dropped what no longer fit: a third of the search's 240k
// seeded pages never reached the policy, and stayed cached for good.
func TestAgentSeedsEveryPage(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "w")
	warm := writeFiles(t, dir, 24, 8<<20)
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("later=%v", later), func(t *testing.T) {
			for _, f := range warm { // charged anew to this run's cgroup
				dropCached(t, f)
			}
			cg, err := OpenCgroup(fmt.Sprintf("cistern-test-seedall-%d", os.Getpid()), 512<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer cg.Close()
			readInCgroup(t, cg, warm...)
			a, stop := startAgent(t, Config{Dir: dir, Cgroup: cg.Path, Policy: "fifo", seedLater: later})
			defer stop()
			var st map[string]uint64
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if st, err = a.Stats(); err != nil {
					t.Fatal(err)
				}
				if (st["seeded_pages"] > 0 && st["added"] >= st["seeded_pages"]) || time.Now().After(deadline) {
					break
				}
			}
			t.Logf("seeded %d pages in %d ms; the policy added %d, events dropped %d", st["seeded_pages"], st["start_seed_ms"], st["added"], st["events_dropped"])
			if a.SeedError() != nil || st["seeded_pages"] < 40000 {
				t.Fatalf("seeded %d pages of 49152 read (error %v)", st["seeded_pages"], a.SeedError())
			}
			if st["events_dropped"] != 0 || st["added"] < st["seeded_pages"] {
				t.Fatalf("the policy added %d of %d seeded pages, %d events dropped", st["added"], st["seeded_pages"], st["events_dropped"])
			}
			// Read while Run runs (it applied the seed): its thread's CPU
			// so far, not only once Run has returned.
			if st["agent_cpu_us"] == 0 {
				t.Errorf("agent_cpu_us 0 while the agent runs, having applied %d events", st["applied"])
			}
		})
	}
}

// TestMRUIsNotSeeded: MRU evicts its newest pages first, so the pages
// cached before its start would be its last victims: the agent does not
// seed it, and they stay. 16 MiB read in a 48 MiB cgroup, an MRU agent
// started as auto starts one (its seed, if any, left for Run) that keeps
// it under 32 MiB, 8 MiB of new files read before it runs and 24 MiB
// after: the warm pages stay.
// Seeded (as the newest: the seed reaches the policy after the pages added
// since the start), the first eviction took 312 of 4,096 of them.
func TestMRUIsNotSeeded(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "m")
	warm := writeFiles(t, filepath.Join(dir, "a-warm"), 16, 1<<20)
	fresh := writeFiles(t, filepath.Join(dir, "b-new"), 32, 1<<20)
	// The agent keeps the cgroup under 32 MiB, 16 MiB below the limit: the
	// kernel's reclaim at the limit (which takes the oldest pages, the
	// warm ones) is not reached while the agent keeps up, also in a TCG
	// guest (with 8 MiB, a 6.1 guest's agent fell behind once and the
	// kernel reclaimed 327 warm pages).
	cg, err := OpenCgroup(fmt.Sprintf("cistern-test-mruseed-%d", os.Getpid()), 48<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	readInCgroup(t, cg, warm...)
	warmBefore := cachedAll(t, warm)
	a, err := Start(Config{Dir: dir, Cgroup: cg.Path, Policy: "mru", Headroom: 16 << 20, seedLater: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	readInCgroup(t, cg, fresh[:8]...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	readInCgroup(t, cg, fresh[8:]...)
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	warmAfter, freshAfter := cachedAll(t, warm), cachedAll(t, fresh)
	st, _ := a.Stats()
	t.Logf("seed skipped %d, seeded %d; warm pages cached %d before, %d after; new %d of %d; evicted by the agent %d, limit reclaims %d",
		st["seed_skipped"], st["seeded_pages"], warmBefore, warmAfter, freshAfter, 32<<20/pageSize, st["pages_evicted"], st["cgroup_limit_hits"])
	if st["seed_skipped"] != 1 || st["seeded_pages"] != 0 {
		t.Fatalf("MRU seeded %d pages (skipped %d): want no seed", st["seeded_pages"], st["seed_skipped"])
	}
	if st["pages_evicted"] < 12<<20/pageSize {
		t.Fatalf("the agent evicted %d pages: want about the 16 MiB read over its 32 MiB", st["pages_evicted"])
	}
	if warmAfter < warmBefore*98/100 {
		t.Fatalf("MRU left %d of %d pages cached before its start", warmAfter, warmBefore)
	}
}
