package pagecachebench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/plot"
	"github.com/cistern-ebpf/cistern/kernel"
	"github.com/cistern-ebpf/cistern/pagecache"
	"golang.org/x/sys/unix"
)

// Options configure `cistern bench pagecache`.
type Options struct {
	Quick    bool
	PlotPath string
	CacheDir string   // where the Linux tree and data files live (default /var/cache/cistern/pagecache)
	Parts    []string // search, getscan, overhead (default all); rocksdb: reads, getscan, percgroup; ycsb: YCSB workloads
	// Workload: "" (the synthetic parts), "rocksdb" (db_bench) or "ycsb" (go-ycsb on RocksDB).
	Workload string
	// GetScanRAMDisk runs GET-SCAN on a RAM-backed loop device rather than
	// on the cache dir's disk (see pcRAMDisk).
	GetScanRAMDisk bool
	Progress       func(string)
}

const linuxSourceTarball = "/usr/src/linux-source-6.1.tar.xz"

func (o *Options) defaults() {
	if o.CacheDir == "" {
		o.CacheDir = "/var/cache/cistern/pagecache"
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Workload == "ycsb" {
		return // no Parts: every YCSB workload, --quick fewer (pagecacheYCSB)
	}
	if len(o.Parts) == 0 && o.Workload == "rocksdb" {
		o.Parts = RocksDBParts
	}
	if len(o.Parts) == 0 {
		o.Parts = Parts
	}
}

// Run runs the page-cache agent's benchmarks (the cachebpf paper's
// file search and GET-SCAN, and the tracking overhead).
func Run(ctx context.Context, opt Options) (*benchkit.Report, error) {
	opt.defaults()
	rep := benchkit.New("pagecache", opt.Quick)
	// The kernel's own reclaim is the "default" every policy is compared with.
	reclaim := kernel.PageReclaim()
	rep.SetConfig("kernel_mglru", reclaim.MGLRU)
	rep.SetConfig("kernel_proactive_reclaim", len(reclaim.Proactive))
	rep.Note("kernel reclaim: " + reclaim.Detail)
	rep.SetConfig("cache_dir", opt.CacheDir)
	if opt.Workload == "ycsb" {
		rep.SetConfig("workload", "ycsb")
		if err := pagecacheYCSB(ctx, rep, opt); err != nil {
			return nil, err
		}
		return rep, nil
	}
	if opt.Workload == "rocksdb" {
		rep.SetConfig("workload", "rocksdb")
		if err := pagecacheRocksDB(ctx, rep, opt); err != nil {
			return nil, err
		}
		return rep, nil
	}
	for _, p := range opt.Parts {
		var err error
		switch p {
		case "search":
			err = pcSearch(ctx, rep, opt)
		case "getscan":
			err = pcGetScan(ctx, rep, opt)
		case "overhead":
			err = pcOverhead(ctx, rep, opt)
		case "zipf":
			err = pcZipf(ctx, rep, opt)
		default:
			err = fmt.Errorf("unknown part %q (have %s)", p, strings.Join(Parts, ", "))
		}
		if err != nil {
			return nil, err
		}
	}
	rep.Section("search: ripgrep over the tree, seconds", rows("search", searchModes),
		[]string{"seconds", "first_search_seconds", "repeat_search_seconds"})
	rep.Section("search headroom: the traced run replayed, pages loaded per 1000 reads", []string{"search/traced"},
		[]string{"trace_page_loads_per_1k_reads", "sim_kernel_loads_per_1k_reads", "sim_opt_loads_per_1k_reads", "sim_oracle_lfu_loads_per_1k_reads", "sim_history_lfu_loads_per_1k_reads", "sim_wtinylfu_loads_per_1k_reads", "sim_mru_loads_per_1k_reads", "sim_lru_loads_per_1k_reads"})
	rep.Section("get-scan: GETs on a hot file while a scan runs", rows("getscan", getScanModes),
		[]string{"get_ops_per_sec", "get_p99_us", "scan_mb_per_sec"})
	rep.Section("overhead: fio randread on a cached file", rows("overhead", overheadModes),
		[]string{"cpu_ns_per_io", "iops", "agent_cost_pct"})
	rep.Section("zipf: fio randread, zipf 1.1 over 4x the cgroup", rows("zipf", zipfModes),
		[]string{"ops_per_sec", "p99_us", "page_loads_per_1k_reads", "cache_mib", "agent_cpu_pct_per_10k_reads"})
	rep.Section("zipf headroom: the traced run replayed, pages loaded per 1000 reads", []string{"zipf/traced"},
		[]string{"trace_page_loads_per_1k_reads", "sim_kernel_loads_per_1k_reads", "sim_opt_loads_per_1k_reads", "sim_oracle_lfu_loads_per_1k_reads", "sim_history_lfu_loads_per_1k_reads", "sim_wtinylfu_loads_per_1k_reads", "sim_s3fifo_loads_per_1k_reads", "sim_lfu_loads_per_1k_reads"})
	if opt.PlotPath != "" {
		if err := pcPlot(rep, opt.PlotPath); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// pcFiles lists the regular files under dir and their page-cache size.
func pcFiles(dir string) (files []string, bytes int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, p)
		bytes += (info.Size() + 4095) &^ 4095
		return nil
	})
	return files, bytes, err
}

// pcDrop drops the files' pages so that the next run reads them from disk.
func pcDrop(files []string) error {
	for _, f := range files {
		if err := pagecache.DropFile(f); err != nil {
			return err
		}
	}
	return nil
}

// pcDropWarm drops the files' pages and reads each once from the device
// (O_DIRECT: nothing cached here), so that a miss costs the same in every
// round. A virtual disk's host caches what was read lately: on this
// machine's, random 4 KiB reads of the RocksDB files ran at 574 IOPS
// (28 ms each at 16 in flight) before one sequential pass over them and
// at 61-75k after, and the rounds of a part, minutes apart, met the
// device in either state (the A/A ratio of two default runs spread
// 0.93-1.14).
func pcDropWarm(files []string) error {
	if err := pcDrop(files); err != nil {
		return err
	}
	buf, err := unix.Mmap(-1, 0, 4<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("device warm-up buffer: %w", err)
	}
	defer unix.Munmap(buf)
	for _, f := range files {
		fd, err := unix.Open(f, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINVAL) {
			return nil // no O_DIRECT (tmpfs): no device under it to warm
		}
		if err != nil {
			return fmt.Errorf("device warm-up: %s: %w", f, err)
		}
		for off := int64(0); ; {
			n, err := unix.Pread(fd, buf, off)
			if err != nil {
				unix.Close(fd)
				return fmt.Errorf("device warm-up: read %s: %w", f, err)
			}
			if n < len(buf) {
				break
			}
			off += int64(n)
		}
		unix.Close(fd)
	}
	return nil
}

// linuxTree unpacks linux-source-6.1 into the cache dir once.
func linuxTree(ctx context.Context, opt Options) (string, error) {
	dir := filepath.Join(opt.CacheDir, "linux-source-6.1")
	done := filepath.Join(opt.CacheDir, ".linux-source-6.1.unpacked")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	if _, err := os.Stat(linuxSourceTarball); err != nil {
		return "", fmt.Errorf("%s missing: install the Debian package linux-source-6.1 (make deps)", linuxSourceTarball)
	}
	opt.Progress("unpacking " + linuxSourceTarball + " into " + opt.CacheDir + " (once)")
	os.RemoveAll(dir)
	if err := os.MkdirAll(opt.CacheDir, 0o755); err != nil {
		return "", err
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xJf", linuxSourceTarball, "-C", opt.CacheDir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpack %s: %v: %s", linuxSourceTarball, err, out)
	}
	exec.Command("sync").Run() // written pages must be clean to be dropped
	return dir, os.WriteFile(done, nil, 0o644)
}

// searchPatterns are the 10 searches: identifiers common in the tree, so
// every search reads every file.
var searchPatterns = []string{
	"spin_lock_irqsave", "EXPORT_SYMBOL_GPL", "kmalloc_array", "copy_from_user", "rcu_read_lock",
	"mutex_unlock", "dev_err_probe", "container_of", "list_for_each_entry_safe", "WARN_ON_ONCE",
}

// pcSearch: 10 consecutive ripgrep searches over the Linux tree in a cgroup
// limited to 70% of the tree's page cache, kernel LRU against MRU.
func pcSearch(ctx context.Context, rep *benchkit.Report, opt Options) error {
	if _, err := exec.LookPath("rg"); err != nil {
		return fmt.Errorf("ripgrep (rg) not installed: make deps")
	}
	tree, err := linuxTree(ctx, opt)
	if err != nil {
		return err
	}
	root := tree
	if opt.Quick {
		root = filepath.Join(tree, "drivers", "net")
	}
	files, bytes, err := pcFiles(root)
	if err != nil {
		return err
	}
	// Ten searches in --quick too (its tree is small: ~0.5 s each): auto
	// can tell a loop only from its second pass, and fewer searches left
	// it no time to act on what it saw.
	searches := 10
	limit := bytes * 7 / 10
	rep.SetConfig("search_tree", root)
	rep.SetConfig("search_files", len(files))
	rep.SetConfig("search_tree_bytes", bytes)
	rep.SetConfig("search_cgroup_limit_bytes", limit)
	rep.SetConfig("search_runs", searches)
	rounds := benchkit.Rounds(opt.Quick)
	rep.SetConfig("search_rounds", rounds)
	err = benchkit.Interleave(ctx, rounds, searchModes, func(s string) { opt.Progress("search: " + s) }, func(ctx context.Context, _ int, mode string) error {
		opt.Progress(fmt.Sprintf("search: %s, %d searches of %d files (%d MiB), cgroup limit %d MiB", mode, searches, len(files), bytes>>20, limit>>20))
		each, a, err := pcSearchRun(ctx, rep, mode, root, files, limit, searches, func(p string) { opt.Progress("search: " + mode + ": " + p) })
		if err != nil {
			return err
		}
		total := 0.0
		for _, s := range each {
			total += s
		}
		m := "search/" + mode
		rep.Sample(m, "seconds", total)
		// The first search reads the whole tree from disk in both modes
		// (each round starts with its pages dropped): the policy can only
		// act on the searches after it, which the speedup compares.
		rep.Sample(m, "repeat_search_seconds", total-each[0])
		rep.Sample(m, "first_search_seconds", each[0])
		// The second: a policy chosen by what it sees (auto) can only act
		// on a loop once it has seen it repeat, so this one runs at the
		// default's pace; the rest is what auto's choice runs.
		if len(each) > 2 {
			rep.Sample(m, "second_search_seconds", each[1])
			rep.Sample(m, "later_search_seconds", total-each[0]-each[1])
		}
		rep.Sample(m, "median_search_seconds", benchkit.Median(each))
		if a != nil {
			pcAgentStats(rep, m, a)
			return a.Close()
		}
		return nil
	})
	if err != nil {
		return err
	}
	rep.PairedRatio("search_speedup_mru", "search/default", "repeat_search_seconds", "search/agent_mru", "repeat_search_seconds")
	headroomVerdicts(rep, "search", "", nil)
	autoTargets(rep, "search", "repeat_search_seconds", true, []string{"agent_mru"})
	rep.PairedRatio("search_traced_vs_default", "search/default", "repeat_search_seconds", "search/traced", "repeat_search_seconds")
	rep.PairedRatio("search_speedup_mru_with_first", "search/default", "seconds", "search/agent_mru", "seconds")
	rep.TargetRatio("search_speedup_mru", ">=", 1.5)
	rep.Note("search: the cgroup limit is 70% of the tree's page cache; v1 also charges the tree's inodes and dentries to it. " +
		"fadvise baselines do not apply: ripgrep cannot be told which files to keep. The agent reports 1 read in 16 to MRU. " +
		"Each round drops the tree's pages first and runs the searches in a fresh cgroup; search_speedup_mru is the median of the rounds' default/agent_mru ratios " +
		"of the searches after the first (the first reads the whole tree from disk in both modes, so counting it made the figure depend on the number of searches); " +
		"search_speedup_mru_with_first counts every search.")
	return nil
}

// pcSearchRun drops the tree's pages and runs the searches in a fresh
// cgroup, with the agent when mode asks for it (traced: the default with
// the access-trace recorder, its headroom sampled into rep); the caller closes the
// returned agent (nil for default) after reading its counters.
func pcSearchRun(ctx context.Context, rep *benchkit.Report, mode, root string, files []string, limit int64, searches int, progress func(string)) (each []float64, a *pagecache.Agent, err error) {
	if err := pcDropWarm(files); err != nil {
		return nil, nil, err
	}
	var cg *pagecache.Cgroup
	stop := func() {}
	name := fmt.Sprintf("cistern-bench-pagecache-%d", os.Getpid())
	if mode == "default" || mode == "traced" {
		if cg, err = pagecache.OpenCgroup(name, limit); err != nil {
			return nil, nil, err
		}
		defer cg.Close()
		if mode == "traced" {
			tr, err := startTrace(ctx, filepath.Dir(root), root, cg.Path)
			if err != nil {
				return nil, nil, err
			}
			defer func() {
				evs, terr := tr.finish()
				if err == nil && terr == nil {
					// The first search reads the tree cold in every mode:
					// it is the warm-up.
					_, terr = sampleHeadroom(rep, "search/traced", evs, 1/float64(searches), 0)
				}
				if err == nil {
					err = terr
				}
			}()
		}
	} else if mode == "agent_auto" {
		var auto *pagecache.Auto
		var stopAuto func()
		if auto, cg, stopAuto, err = startAuto(ctx, pagecache.Config{Dir: root, Cgroup: name, Limit: limit}, progress); err != nil {
			return nil, nil, err
		}
		defer func() {
			stopAuto()
			sampleAuto(rep, "search/agent_auto", "", auto)
			auto.Close()
		}()
	} else {
		// One read in 16 reported: the agent shares 2 cores with
		// ripgrep, and MRU needs recency only roughly here.
		if a, err = pagecache.Start(pagecache.Config{Dir: root, Cgroup: name, Limit: limit, Policy: "mru", AccessSample: 16}); err != nil {
			return nil, nil, err
		}
		cg = a.Cgroup()
		stop = runAgent(ctx, a)
	}
	defer stop()
	start := time.Now()
	for i := range searches {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "sh", "-c", `echo $$ > "$0/cgroup.procs" && exec rg -c -j2 --no-ignore --hidden --no-messages "$1" "$2" > /dev/null`,
			cg.Path, searchPatterns[i%len(searchPatterns)], root)
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 { // 1: no match
				stop()
				stop = func() {}
				if a != nil {
					a.Close()
				}
				return nil, nil, fmt.Errorf("search %d: %w", i, err)
			}
		}
		each = append(each, time.Since(t0).Seconds())
		if mode == "agent_auto" && progress != nil { // beside auto's decisions, timed from the same start
			progress(fmt.Sprintf("search %d ends at %.1f s (%.1f s)", i+1, time.Since(start).Seconds(), each[i]))
		}
	}
	return each, a, nil
}

// runAgent runs a in the background; the returned func stops it and waits.
func runAgent(ctx context.Context, a *pagecache.Agent) func() {
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(actx); err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func pcClose(a *pagecache.Agent, cg *pagecache.Cgroup) error {
	if a != nil {
		return a.Close()
	}
	if cg != nil {
		return cg.Close()
	}
	return nil
}

// pcAgentStats records the agent's counters that tell whether it kept up.
func pcAgentStats(rep *benchkit.Report, mode string, a *pagecache.Agent) {
	st, err := a.Stats()
	if err != nil {
		return
	}
	for _, k := range []string{"events_add", "pages_added", "events_dropped", "victims", "pages_evicted", "removed", "cgroup_limit_hits",
		"not_evicted_busy", "not_evicted_dirty", "not_evicted_writeback", "not_evicted_open_failed", "policy_fallback_evictions",
		"events_del", "events_del_own", "retried", "agent_cpu_us", "fadvise_calls", "fadvise_us", "fadvise_max_us", "evict_cpu_us", "first_reads", "acc_hits", "read_again", "events_read", "events_read_more", "agent_wakeups", "agent_preempted"} {
		rep.Set(mode, k, st[k])
	}
}

// pcPlot draws every part's metrics relative to its default mode.
func pcPlot(rep *benchkit.Report, path string) error {
	groups := []struct{ label, part, metric string }{
		{"search speed", "search", "seconds"},
		{"GET ops/s", "getscan", "get_ops_per_sec"},
		{"scan MB/s", "getscan", "scan_mb_per_sec"},
		{"zipf IOPS", "zipf", "ops_per_sec"},
	}
	kinds := []struct {
		name  string
		modes []string
	}{
		{"agent (MRU, get-scan)", []string{"agent_mru", "agent_get_scan"}},
		{"W-TinyLFU", []string{"agent_wtinylfu"}},
		{"auto", []string{"agent_auto"}},
		{"fadvise_noreuse", []string{"fadvise_noreuse"}},
		{"fadvise_dontneed", []string{"fadvise_dontneed"}},
	}
	get := func(mode, metric string) (float64, bool) {
		v, ok := rep.Get(mode, metric)
		f, isF := v.(float64)
		return f, ok && isF && f > 0
	}
	var labels []string
	series := make([]plot.BarSeries, len(kinds))
	for i, k := range kinds {
		series[i].Name = k.name + " / default"
	}
	for _, g := range groups {
		base, ok := get(g.part+"/default", g.metric)
		if !ok {
			continue
		}
		labels = append(labels, g.label)
		for i, k := range kinds {
			v := 0.0
			for _, m := range k.modes {
				if x, ok := get(g.part+"/"+m, g.metric); ok {
					v = x / base
					if g.metric == "seconds" {
						v = base / x
					}
				}
			}
			series[i].Values = append(series[i].Values, v)
		}
	}
	if len(labels) == 0 {
		return nil
	}
	var used []plot.BarSeries // kinds no part run has are left out
	for _, s := range series {
		if slices.ContainsFunc(s.Values, func(v float64) bool { return v > 0 }) {
			used = append(used, s)
		}
	}
	return plot.BarChart(path, "Page-cache agent against the kernel LRU ("+rep.Kernel()+")", "relative to default (higher is better)", labels, used)
}
