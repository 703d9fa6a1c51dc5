// The plan: which steps run in each guest, the replay checks, and the
// host-side preparation (kernels fetched, binaries built, host replays).

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cistern-ebpf/cistern/internal/vm"
)

// A step runs inside the guest; its output and exit code land in /results.
type step struct {
	Name   string // file stem in /results
	System string // column of the table; "" for load-all and doctor
	Pkg    string // package whose test binary runs (cwd = its directory)
	Run    string // -test.run pattern, "" for all
	Full   bool   // only with FULL=1
	// Servers: the step runs its server tests in the fast matrix too
	// (CISTERN_SKIP_SERVERS=0, the Go test clients prebuilt in
	// bin/pgclient); with FULL=1 the package's own step runs them, so this
	// one is left out.
	Servers bool
	Lane    int // steps of one lane run in order; the two lanes run side by side
	// FullSwap: with FULL=1 the step runs in the other lane. Lane 1 then
	// holds the steps that take testenv.Exclusive(Traffic) (kv, capture,
	// the capture bench: ~75 min in a 7.2 guest), so the evict, page-cache
	// and query steps move to lane 0 to even the lanes.
	FullSwap bool
	Timeout  time.Duration
}

// systems in table order, with the packages whose tests decide them.
var systemOrder = []string{"pool", "kv", "accum", "capture", "evict", "pagecache", "cbuf", "query"}

// plan lists the guest's steps. The fast matrix (CI) runs every test that
// needs no server, with -test.short; FULL=1 adds the server tests
// (memcached, PostgreSQL, MariaDB) and the long ones.
var plan = []step{
	{Name: "loadall", Pkg: "internal/bpfcheck", Lane: 0, Timeout: 10 * time.Minute},
	{Name: "pool", System: "pool", Pkg: "pool", Lane: 1, Timeout: 10 * time.Minute},
	{Name: "kv", System: "kv", Pkg: "kv", Lane: 1, Timeout: 15 * time.Minute},
	{Name: "kvgen", System: "kv", Pkg: "internal/kvgen", Lane: 0, Timeout: 5 * time.Minute},
	{Name: "accum", System: "accum", Pkg: "accum", Lane: 1, Timeout: 10 * time.Minute},
	{Name: "capture", System: "capture", Pkg: "capture", Lane: 1, Timeout: 15 * time.Minute},
	// Issue #26's attach tests (exec and library load, --hold-new, unread
	// connections) with their PostgreSQL, and #37's Node.js clients
	// (node-postgres, mysql2; MariaDB too), in lane 0, which ends first.
	{Name: "capture-attach", System: "capture", Pkg: "capture", Run: "^(TestAttachOn|TestUnreadCounted|TestHoldNeverLeavesStopped|TestCaptureNode)",
		Servers: true, Lane: 0, Timeout: 20 * time.Minute},
	// The capture bench's miniature runs: pgbench and the churn of 160
	// psql connections, with and without --hold-new, and the attach mode.
	// In lane 1 after capture: both take testenv.Exclusive(Traffic) (the
	// churn for ~20 min in a guest), and in lane 0 it held the lock while
	// capture's --all tests waited out their step's timeout (sid, FULL=1).
	{Name: "capture-bench", System: "capture", Pkg: "bench/capture", Run: "^(TestCaptureBenchRuns|TestCaptureBenchChurn|TestCaptureBenchAttach)$",
		Full: true, Lane: 1, Timeout: 40 * time.Minute},
	// Twenty minutes: TestEveryPolicyLoads alone took 389 s in a 7.2 guest
	// beside two other guests, and the step 10 minutes was not enough.
	{Name: "evict", System: "evict", Pkg: "evict", Lane: 0, Timeout: 20 * time.Minute},
	// Thirty minutes: TestMatchesLibCacheSim's 56 replays take 5-6 min in a
	// 6.12 guest; a 7.2 guest beside the capture bench's churn did 11 in 10,
	// and one beside two other guests took 865 s for them and ran out of
	// 20 minutes in the next test.
	{Name: "cache", System: "evict", Pkg: "evict/replay", Lane: 1, FullSwap: true, Timeout: 30 * time.Minute},
	// Thirty minutes: the recorded-trace and auto tests read for a fixed
	// amount (or until auto decides), which TCG makes minutes (8 of 10 were
	// used before them on a loaded machine); a sid guest beside a CI run
	// took 619 s for TestAutoFollowsTheWorkload alone and ran out of 20.
	{Name: "pagecache", System: "pagecache", Pkg: "pagecache", Lane: 1, FullSwap: true, Timeout: 30 * time.Minute},
	{Name: "cbuf", System: "cbuf", Pkg: "cbuf", Lane: 0, Timeout: 10 * time.Minute},
	{Name: "cbuf-kcomp", System: "cbuf", Pkg: "cbuf/kcomp", Lane: 0, Timeout: 5 * time.Minute},
	{Name: "query", System: "query", Pkg: "query", Run: "RandomValid|RandomInvalid|Exit|Limit", Lane: 1, FullSwap: true, Timeout: 20 * time.Minute},
}

// only, when not nil, names the steps --steps asks for ("replay": the
// replay checks); the others do not run.
var only map[string]bool

// runs tells whether the step is in the fast (full false) or FULL=1 matrix
// (and in --steps, if given).
func (s step) runs(full bool) bool {
	if only != nil && !only[s.Name] {
		return false
	}
	if full {
		return !s.Servers
	}
	return !s.Full
}

// lane is the step's lane in the fast (full false) or FULL=1 matrix.
func (s step) lane(full bool) int {
	if full && s.FullSwap {
		return 1 - s.Lane
	}
	return s.Lane
}

// timeout is the step's -test.timeout. With FULL=1 a package's own step
// runs the tests of its Servers steps too (capture's attach and Node.js
// tests, 10-15 min in a guest), so it gets their time as well: with its
// own 15 minutes alone, sid's FULL capture step timed out with the attach
// tests done and the rest not started.
func (s step) timeout(full bool) time.Duration {
	d := s.Timeout
	if !full || s.Run != "" {
		return d
	}
	for _, o := range plan {
		if o.Servers && o.Pkg == s.Pkg {
			d += o.Timeout
		}
	}
	return d
}

// replayChecks compare in-kernel replay hit ratios in the guest with the
// host's: the same policy object must give the same answer on every kernel.
var replayChecks = []replayCheck{{"lru", "10000", ""}, {"s3fifo", "10000", ""}, {"lhd", "1000", ""}, {"get-scan", "1000000", "bytes"}}

// A replay check; Unit "bytes" sizes the cache in bytes (GET-SCAN in bytes
// was once refused as too complex on 6.12 only).
type replayCheck struct{ Policy, Size, Unit string }

func (c replayCheck) name() string {
	if c.Unit != "" {
		return c.Policy + "-" + c.Unit
	}
	return c.Policy
}

func (c replayCheck) key() string {
	if c.Unit != "" {
		return c.Policy + "/" + c.Size + "/" + c.Unit
	}
	return c.Policy + "/" + c.Size
}

func (c replayCheck) args() []string {
	a := []string{"--policy", c.Policy, "--size", c.Size}
	if c.Unit != "" {
		a = append(a, "--unit", c.Unit)
	}
	return a
}

func fetch(root string, names []string) error {
	var suites []string
	for _, n := range names {
		s, ok := vm.Lookup(n)
		if !ok {
			return fmt.Errorf("kernel-matrix: unknown kernel %q (%s)", n, vm.Names())
		}
		if _, err := vm.Open(s.Suite); err != nil {
			suites = append(suites, s.Suite)
		}
	}
	if len(suites) == 0 {
		return nil
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "scripts/kernel-matrix/fetch-kernels.sh")}, suites...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// build compiles cistern and each step's test binary. CGO is off so the
// binaries do not depend on the host's libc version (they run on the host's
// file system anyway, but a static binary is what a user copies to a node).
func build(root, bin string, full bool) error {
	env := append(os.Environ(), "CGO_ENABLED=0")
	run := func(args ...string) error {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kernel-matrix: go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("build", "-o", filepath.Join(bin, "cistern"), "./cmd/cistern"); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, s := range plan {
		if !s.runs(full) || seen[s.Pkg] {
			continue
		}
		seen[s.Pkg] = true
		if err := run("test", "-c", "-o", filepath.Join(bin, testBin(s.Pkg)), "./"+s.Pkg); err != nil {
			return err
		}
	}
	// The Go TLS client the capture tests run (capture/gotls_test.go's
	// buildPGClient), built here: a guest takes longer than a test's
	// timeout to compile it. One file per name the tests ask for.
	pgc := filepath.Join(bin, "pgclient")
	if err := os.MkdirAll(pgc, 0o755); err != nil {
		return err
	}
	for _, n := range []string{"pgclient", "pgclient-symtab", "pgclient-exec", "pgclient-unread"} {
		if err := run("build", "-o", filepath.Join(pgc, n), "./internal/testprogs/pgclient"); err != nil {
			return err
		}
	}
	return run("build", "-ldflags=-s -w", "-o", filepath.Join(pgc, "pgclient-stripped"), "./internal/testprogs/pgclient")
}

func testBin(pkg string) string { return strings.ReplaceAll(pkg, "/", "-") + ".test" }

func traceFile(root string) string {
	return filepath.Join(root, "..", "shared", "data", "traces", "twitter_cluster52_1m.csv.zst")
}

// hostReplay runs the replay checks on the host, for the guests to match.
func hostReplay(root, bin string) (map[string]string, error) {
	out := map[string]string{}
	if _, err := os.Stat(traceFile(root)); err != nil {
		fmt.Println("kernel-matrix: no shared/data/traces beside the clone: replay checks skipped")
		return out, nil
	}
	for _, c := range replayChecks {
		f := filepath.Join(bin, "replay-"+c.name()+".json")
		args := append([]string{"cache", "replay", "--trace", traceFile(root), "--format", "twitter"}, c.args()...)
		if b, err := exec.Command(filepath.Join(bin, "cistern"), append(args, "--json", f)...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kernel-matrix: host replay %s: %v: %s", c.name(), err, b)
		}
		b, _ := os.ReadFile(f)
		os.Remove(f)
		out[c.key()] = hitRatio(b)
	}
	return out, nil
}

func hitRatio(b []byte) string {
	var v map[string]any
	if json.Unmarshal(b, &v) != nil {
		return "unparsable"
	}
	if h, ok := v["hit_ratio"].(float64); ok {
		return fmt.Sprintf("%.6f", h)
	}
	return "no hit_ratio"
}
