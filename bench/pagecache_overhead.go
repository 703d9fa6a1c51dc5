package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/pagecache"
)

// pcOverhead: fio randread (psync, 4 KiB) on a cached file, the agent off
// and on with the no-op policy; CPU per I/O counts fio's and the agent's.
func pcOverhead(ctx context.Context, rep *benchkit.Report, opt PagecacheOptions) error {
	if _, err := exec.LookPath("fio"); err != nil {
		return fmt.Errorf("fio not installed: make deps")
	}
	size, runtime, reps := int64(256<<20), 8, 3
	if opt.Quick {
		size, runtime, reps = 64<<20, 3, 2
	}
	dir := filepath.Join(opt.CacheDir, "overhead")
	path, err := pcDataFile(dir, fmt.Sprintf("data-%dM", size>>20), size)
	if err != nil {
		return err
	}
	rep.SetConfig("overhead_file_bytes", size)
	rep.SetConfig("overhead_fio", fmt.Sprintf("randread bs=4k psync, %ds, %d runs per mode (median)", runtime, reps))
	modes := []string{"off", "agent_none", "agent_lru"}
	per := map[string][]float64{}
	iops := map[string][]float64{}
	for r := range reps {
		for _, mode := range modes { // interleaved: drift hits every mode alike
			opt.Progress(fmt.Sprintf("overhead: %s, run %d of %d", mode, r+1, reps))
			c, n, err := runOverhead(ctx, mode, dir, path, runtime)
			if err != nil {
				return fmt.Errorf("overhead %s: %w", mode, err)
			}
			per[mode] = append(per[mode], c/n*1e9)
			iops[mode] = append(iops[mode], n/float64(runtime))
		}
	}
	for _, mode := range modes {
		m := "overhead/" + mode
		rep.Set(m, "cpu_ns_per_io", benchkit.Median(per[mode]))
		rep.Set(m, "iops", benchkit.Median(iops[mode]))
	}
	off := benchkit.Median(per["off"])
	pct := (benchkit.Median(per["agent_none"]) - off) / off * 100
	rep.Ratio("cpu_per_io_overhead_pct", pct)
	rep.Ratio("cpu_per_io_overhead_pct_lru", (benchkit.Median(per["agent_lru"])-off)/off*100)
	rep.Target("cpu_per_io_overhead_pct", pct, "<=", 3)
	rep.Note("overhead: agent_none tracks adds and deletes only (its policy ignores reads, so the read tracepoint is not attached); " +
		"agent_lru also reports every read to the policy and is shown for the cost of that access signal")
	return nil
}

// runOverhead runs fio once and returns the CPU seconds (fio + this
// process, where the agent runs) and the I/Os done.
func runOverhead(ctx context.Context, mode, dir, path string, runtime int) (cpu, ios float64, err error) {
	name := fmt.Sprintf("cistern-bench-pagecache-%d", os.Getpid())
	var cg *pagecache.Cgroup
	var a *pagecache.Agent
	stop := func() {}
	if mode == "off" {
		cg, err = pagecache.OpenCgroup(name, 16<<30)
	} else {
		policy := map[string]string{"agent_none": "none", "agent_lru": "lru"}[mode]
		a, err = pagecache.Start(pagecache.Config{Dir: dir, Cgroup: name, Limit: 16 << 30, Policy: policy})
		if a != nil {
			cg = a.Cgroup()
			stop = runAgent(ctx, a)
		}
	}
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		stop()
		if cerr := pcClose(a, cg); err == nil {
			err = cerr
		}
	}()
	// Warm the file inside the cgroup (fio must not invalidate it).
	if out, err := exec.CommandContext(ctx, "sh", "-c", `echo $$ > "$0/cgroup.procs" && exec cat "$1" > /dev/null`, cg.Path, path).CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("warm: %v: %s", err, out)
	}
	time.Sleep(200 * time.Millisecond) // the agent drains the warm-up's events
	self0 := selfCPU()
	cmd := exec.CommandContext(ctx, "sh", "-c", `echo $$ > "$0/cgroup.procs" && exec fio --name=rr --filename="$1" --rw=randread --bs=4k --ioengine=psync --invalidate=0 --time_based --runtime="$2" --output-format=json`,
		cg.Path, path, fmt.Sprint(runtime))
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("fio: %w", err)
	}
	var res struct {
		Jobs []struct {
			Read struct {
				TotalIOs float64 `json:"total_ios"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		return 0, 0, fmt.Errorf("fio output: %v", err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	child := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return (child + selfCPU() - self0).Seconds(), res.Jobs[0].Read.TotalIOs, nil
}
