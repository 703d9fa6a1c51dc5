package pagecachebench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

// The GET-SCAN workload runs in child processes (page cache is charged to
// a process's memory cgroup, and GET-SCAN tells scanners apart by pid):
// this binary re-executed with pcChildEnv set. The child moves itself into
// the cgroup, warms up, prints "ready", waits for a line on stdin, runs
// and prints its pcChildResult as JSON.
const pcChildEnv = "CISTERN_PAGECACHE_CHILD"

// pcLatReservoir latencies are kept per GET thread (a uniform sample).
const pcLatReservoir = 1 << 16

type pcChildSpec struct {
	Role     string // "get" or "scan"
	Cgroup   string // cgroup directory to join
	File     string
	Threads  int           // get: reader threads
	Duration time.Duration // run time after "go"
	Advice   string        // scan: "", "noreuse" or "dontneed"
	Seed     uint64
}

type pcChildResult struct {
	Ops     uint64  // get: preads; scan: bytes
	Seconds float64 // measured run time
	P99us   float64 // get: 99th percentile pread latency
	MeanUs  float64 // get: mean pread latency (of the sample)
	CPUs    float64 // the child's CPU seconds (user + system) in the run
	// get: the GET threads' involuntary context switches and time spent
	// runnable but waiting for a CPU (schedstat), over the run: what
	// preemption (by the agent's thread among others) cost the GETs.
	Preempts  uint64
	RunqWaitS float64
	Err       string
}

func init() {
	if s := os.Getenv(pcChildEnv); s != "" {
		var spec pcChildSpec
		res := pcChildResult{}
		if err := json.Unmarshal([]byte(s), &spec); err != nil {
			res.Err = err.Error()
		} else if err := runPCChild(spec, &res); err != nil {
			res.Err = err.Error()
		}
		json.NewEncoder(os.Stdout).Encode(res)
		os.Exit(0)
	}
}

// execSelf starts this binary again with env set to spec as JSON (the
// children's init picks it up), its stdin and stdout piped, its stderr
// this process's.
func execSelf(ctx context.Context, env string, spec any) (*exec.Cmd, io.WriteCloser, io.ReadCloser, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), env+"="+string(js))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	return cmd, in, out, nil
}

func runPCChild(spec pcChildSpec, res *pcChildResult) error {
	if err := os.WriteFile(spec.Cgroup+"/cgroup.procs", []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return fmt.Errorf("join cgroup: %w", err)
	}
	f, err := os.Open(spec.File)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	fd := int(f.Fd())
	buf := make([]byte, 1<<20)
	// Warm the hot set twice, so it starts on the kernel LRU's active list:
	// an established working set that the scan then pollutes. Read once,
	// it began on the inactive list, and whether the default LRU kept it
	// became a race between the first GETs and the scan, won or lost
	// round by round (default GET rates of 0.14 to 0.97 M/s in one run).
	for pass := 0; pass < 2 && spec.Role == "get"; pass++ {
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := unix.Pread(fd, buf, off); err != nil {
				return err
			}
		}
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for go: %w", err)
	}
	cpu0 := benchkit.SelfCPU() // the warm-up's reads are not the run's
	start := time.Now()
	end := start.Add(spec.Duration)
	switch spec.Role {
	case "get":
		var mu sync.Mutex
		var lat []float64
		var ops uint64
		var sumUs float64 // every GET's, not the sample's: rare slow GETs weigh exactly
		var wg sync.WaitGroup
		for t := range spec.Threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // the thread's own counters below
				defer runtime.UnlockOSThread()
				pre0, wait0 := threadSched()
				defer func() {
					pre1, wait1 := threadSched()
					mu.Lock()
					res.Preempts += pre1 - pre0
					res.RunqWaitS += (wait1 - wait0).Seconds()
					mu.Unlock()
				}()
				r := rand.New(rand.NewPCG(spec.Seed, uint64(t)))
				b := make([]byte, 4096)
				pages := size / 4096
				// A fixed reservoir of latencies, not one per GET: the
				// child's memory is charged to the cgroup, and a list
				// growing with the GET rate (tens of MB) took the room
				// of the page cache, most in the mode with the fastest GETs.
				mine := make([]float64, 0, pcLatReservoir)
				var n uint64
				var sum float64
				for ; ; n++ {
					if n%64 == 0 && time.Now().After(end) {
						break
					}
					t0 := time.Now()
					if _, err := unix.Pread(fd, b, r.Int64N(pages)*4096); err != nil {
						break
					}
					us := float64(time.Since(t0).Nanoseconds()) / 1e3
					sum += us
					if len(mine) < pcLatReservoir {
						mine = append(mine, us)
					} else if k := r.Uint64N(n + 1); k < pcLatReservoir { // Algorithm R
						mine[k] = us
					}
				}
				mu.Lock()
				ops += n
				sumUs += sum
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		res.Ops = ops
		res.P99us = benchkit.Percentile(lat, 99)
		// The mean of all GETs: a sample's mean swings with the few
		// multi-millisecond GETs it happens to hold (CI saw 1.3x).
		if ops > 0 {
			res.MeanUs = sumUs / float64(ops)
		}
	case "scan":
		if spec.Advice == "noreuse" {
			unix.Fadvise(fd, 0, 0, unix.FADV_NOREUSE)
		}
		off := int64(0)
		for time.Now().Before(end) {
			n, err := unix.Pread(fd, buf, off)
			if err != nil {
				return err
			}
			if spec.Advice == "dontneed" && n > 0 {
				unix.Fadvise(fd, off, int64(n), unix.FADV_DONTNEED)
			}
			res.Ops += uint64(n)
			off += int64(n)
			if n < len(buf) {
				off = 0
			}
		}
	default:
		return fmt.Errorf("unknown role %q", spec.Role)
	}
	res.Seconds = time.Since(start).Seconds()
	res.CPUs = (benchkit.SelfCPU() - cpu0).Seconds()
	return nil
}

// threadSched is the calling thread's involuntary context switches and its
// time waiting on a run queue (the second field of schedstat).
func threadSched() (preempts uint64, runqWait time.Duration) {
	if b, err := os.ReadFile("/proc/thread-self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "nonvoluntary_ctxt_switches:"); ok {
				preempts, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	if b, err := os.ReadFile("/proc/thread-self/schedstat"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 2 {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			runqWait = time.Duration(ns)
		}
	}
	return preempts, runqWait
}
