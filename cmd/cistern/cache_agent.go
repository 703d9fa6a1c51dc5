package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/internal/metrics"
	"github.com/cistern-ebpf/cistern/internal/size"
	"github.com/cistern-ebpf/cistern/kernel"
	"github.com/cistern-ebpf/cistern/pagecache"
)

func newCacheAgentCmd() *cobra.Command {
	var (
		cfg              pagecache.Config
		limit, metricsAt string
		headroom         string
		scanPIDs         []int
		autoMargin       float64
		autoInterval     time.Duration
	)
	// The registry's page-cache policies ("none", the bench's no-op, is
	// accepted but not offered).
	agentPolicies := strings.Join(append(evict.Names(evict.PageCache), pagecache.AutoPolicy), "|")
	c := &cobra.Command{
		Use:   "agent --cgroup PATH [--limit SIZE] --dir DIR --policy " + agentPolicies + " [--scan-pid PID ... | --scan-read-pages N] [--metrics ADDR]",
		Short: "Run a page-cache eviction policy for a memory cgroup",
		Long: `agent applies an eviction policy to the page cache of the files under DIR
charged to a memory cgroup (v1 memory controller, or v2), on a mainline
kernel. Tracepoints report folios added, deleted and read; the agent feeds
them to the policy in the kernel and, when the cgroup nears its limit,
drops the policy's victims itself (posix_fadvise DONTNEED) before the
kernel has to reclaim. --limit creates the cgroup (removed at exit);
without it PATH must exist. Files created or moved under DIR while it runs
are watched too (fanotify). Put the workload in the cgroup (PATH/cgroup.procs). Stops on
SIGINT or SIGTERM and prints its counters.

--policy auto samples the cgroup's reads (one page in 2^k, SHARDS: only
the sampled pages' reads leave the kernel), simulates every candidate and
the kernel's default on them every --auto-interval, runs the best while it
misses --auto-margin percent less than the default, and otherwise steps
aside: no policy runs, nothing is evicted, the kernel's default keeps the
cache. Each change is printed with its reason; the choice is also in the
metrics (auto_policy_<name>). Its candidates include get-scan, with a
thread whose reads ask for --scan-read-pages pages or more (default 32,
128 KiB) taken for a scanner. With --scan-pid, auto takes the named
processes for the scanners instead, and serves the others first: a
scanner's missed page weighs 1/32 of another reader's (it shares its
read's I/O), and the default's misses are counted as the cgroup loads
them, not as simulated. Declared scanners also start get-scan at once;
it is kept while the cgroup loads no more than the margin over the
kernel model's default, and otherwise auto steps aside and measures the
default before it runs anything again.

get-scan needs to know the scanners: --scan-pid names them, or
--scan-read-pages N takes every thread whose latest read asked for N
pages or more for one (a point read is a block or a value; a scan reads
a readahead window or a large buffer).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Cgroup == "" || cfg.Dir == "" || cfg.Policy == "" {
				return cli.Usagef("--cgroup, --dir and --policy are required")
			}
			auto := cfg.Policy == pagecache.AutoPolicy
			var policy evict.Policy
			if !auto {
				var err error
				if policy, err = evict.Lookup(cfg.Policy, evict.PageCache); err != nil {
					return cli.Usagef("--%v, %s", err, pagecache.AutoPolicy)
				}
			}
			if autoMargin <= 0 || autoMargin >= 100 {
				return cli.Usagef("--auto-margin %g: want a percentage between 0 and 100", autoMargin)
			}
			if len(scanPIDs) > 0 && !policy.ScanIDs && !auto {
				return cli.Usagef("--scan-pid: --policy %s takes no scanner ids", cfg.Policy)
			}
			if cfg.ScanReadPages > 0 && !auto && !(policy.ScanIDs && policy.Accesses) {
				return cli.Usagef("--scan-read-pages: --policy %s does not tell scanners by their reads (get-scan does)", cfg.Policy)
			}
			for _, p := range scanPIDs {
				if p <= 0 {
					return cli.Usagef("--scan-pid %d: want a process or thread id", p)
				}
			}
			if limit != "" {
				n, err := size.Parse(limit)
				if err != nil {
					return cli.Usagef("--limit: %v", err)
				}
				cfg.Limit = n
			}
			if headroom != "" {
				n, err := size.Parse(headroom)
				if err != nil {
					return cli.Usagef("--headroom: %v", err)
				}
				cfg.Headroom = n
			}
			if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
				return cli.Usagef("--dir %s: not a directory", cfg.Dir)
			}
			if err := cli.RequireRoot("cistern cache agent"); err != nil {
				return err
			}
			if err := rlimit.RemoveMemlock(); err != nil {
				return fmt.Errorf("remove memlock limit: %w", err)
			}
			if s := cfg.AccessSample; s == 0 || s&(s-1) != 0 {
				return cli.Usagef("--access-sample %d: want a power of 2", s)
			}
			cfg.ScanPIDs = scanPIDs
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if auto {
				return runAuto(ctx, cmd, pagecache.AutoConfig{Config: cfg, MarginPct: autoMargin, Interval: autoInterval}, metricsAt)
			}
			a, err := pagecache.Start(cfg)
			if err != nil {
				return agentStartError(err)
			}
			defer a.Close()
			if metricsAt != "" {
				addr, err := metrics.Serve(ctx, metricsAt, metrics.NewCounterSet("cistern", "pagecache", a.Stats))
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "metrics on http://%s/metrics\n", addr)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "agent: policy %s, %d files under %s, cgroup %s; Ctrl-C stops\n",
				cfg.Policy, a.Files(), cfg.Dir, a.Cgroup().Path)
			fmt.Fprintf(cmd.ErrOrStderr(), "agent: new files under %s noticed by %s\n", cfg.Dir, a.WatchMethod())
			if cfg.ScanReadPages > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "agent: a thread whose latest read asked for %d pages (%d KiB) or more is a scanner: the folios it adds are evicted first\n", cfg.ScanReadPages, cfg.ScanReadPages*4)
			}
			if st, err := a.Stats(); err == nil && st["seed_skipped"] == 1 {
				fmt.Fprintf(cmd.ErrOrStderr(), "agent: the pages cached before the start are not given to %s, which evicts its newest first: they would be its last victims\n", cfg.Policy)
			} else if err := a.SeedError(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "agent: the pages cached before the start stay the kernel's to reclaim: %v\n", err)
			} else if st, err := a.Stats(); err == nil && st["seeded_pages"]+st["seed_foreign_pages"] > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "agent: %d pages of %d files cached before the start given to the policy, %d of them active and %d referenced in the kernel's lists (%d charged to other cgroups left alone)\n",
					st["seeded_pages"], st["seeded_files"], st["seeded_active_pages"], st["seeded_referenced_pages"], st["seed_foreign_pages"])
			}
			if policy.Accesses {
				fmt.Fprintf(cmd.ErrOrStderr(), "agent: reads seen through %s\n", pagecache.ReadSignal())
			}
			runErr := a.Run(ctx)
			st, err := a.Stats()
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "agent: reading counters: %v\n", err)
			} else {
				printCounters(cmd, st)
			}
			if cerr := a.Close(); cerr != nil && runErr == nil {
				runErr = cerr
			}
			return runErr
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Cgroup, "cgroup", "", "memory cgroup: a path in the cgroup filesystem, or relative to the memory hierarchy's root")
	f.StringVar(&limit, "limit", "", "create the cgroup with this memory limit (e.g. 512M, 2G)")
	f.StringVar(&cfg.Dir, "dir", "", "directory whose files' page cache the policy manages")
	f.StringVar(&cfg.Policy, "policy", "", "eviction policy: "+agentPolicies)
	f.IntSliceVar(&scanPIDs, "scan-pid", nil, "get-scan, scan-only, auto: a process or thread whose reads are scans (repeatable)")
	f.Uint32Var(&cfg.ScanReadPages, "scan-read-pages", 0, fmt.Sprintf("get-scan: a thread whose latest read asked for this many pages or more is a scanner (0: only --scan-pid; auto's get-scan: %d)", pagecache.DefaultScanReadPages))
	f.StringVar(&headroom, "headroom", "", "start evicting this far below the limit, fixed (default: adaptive, from max(limit/256, 1M), doubled when the kernel had to reclaim at the limit; at most limit/2)")
	f.Uint32Var(&cfg.AccessSample, "access-sample", 1, "report one read in N to the policy (N a power of 2): less CPU under heavy reads")
	f.StringVar(&metricsAt, "metrics", "", "serve Prometheus metrics on ADDR (HOST:PORT)")
	f.Float64Var(&autoMargin, "auto-margin", pagecache.DefaultAutoMarginPct, "auto: run a policy only if it misses this many percent less than the kernel's default in simulation")
	f.DurationVar(&autoInterval, "auto-interval", 10*time.Second, "auto: time between decisions")
	return c
}

// runAuto runs --policy auto until ctx ends, printing every decision.
func runAuto(ctx context.Context, cmd *cobra.Command, cfg pagecache.AutoConfig, metricsAt string) error {
	cfg.OnDecision = func(d pagecache.Decision) {
		run := d.Policy
		if run == "" {
			run = "the kernel's default"
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "auto: %s: running %s: %s\n", d.At.Format(time.TimeOnly), run, d.Reason)
	}
	a, err := pagecache.StartAuto(cfg)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	defer a.Close()
	if metricsAt != "" {
		addr, err := metrics.Serve(ctx, metricsAt, metrics.NewCounterSet("cistern", "pagecache", a.Stats))
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "metrics on http://%s/metrics\n", addr)
	}
	bits, pages := a.SampleRate()
	fmt.Fprintf(cmd.ErrOrStderr(), "agent: policy auto, files under %s, cgroup %s: one page in %d sampled (a %d-page cache simulated), a decision every %s; the kernel's default runs until the first; Ctrl-C stops\n",
		cfg.Dir, a.Cgroup().Path, 1<<bits, pages, cfg.Interval)
	if len(cfg.ScanPIDs) > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "agent: scanners %v declared: their reads are scans, a page they miss weighs 1/%d of another reader's, and the default's misses are counted as the cgroup loads them\n", cfg.ScanPIDs, pagecache.ScanMissWeight)
	} else {
		n := cfg.ScanReadPages
		if n == 0 {
			n = pagecache.DefaultScanReadPages
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "agent: a thread whose read asks for %d pages or more is taken for a scanner by get-scan's simulation; --scan-pid names them instead\n", n)
	}
	runErr := a.Run(ctx)
	if st, err := a.Stats(); err == nil {
		printCounters(cmd, st)
	}
	if cerr := a.Close(); cerr != nil && runErr == nil {
		runErr = cerr
	}
	return runErr
}

func printCounters(cmd *cobra.Command, st map[string]uint64) {
	keys := make([]string, 0, len(st))
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(cmd.OutOrStdout(), "%-28s %d\n", k, st[k])
	}
}

// agentStartError maps pagecache.Start's errors: what the kernel refused or
// failed to load is a runtime error (exit 1, kernel.LoadError's one
// sentence); the rest concern the flags (the cgroup, the directory).
func agentStartError(err error) error {
	if kernel.IsLoadError(err) {
		return err
	}
	return cli.Usagef("%v", err)
}
