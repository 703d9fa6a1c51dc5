package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/evict/sim"
	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/internal/size"
	"github.com/cistern-ebpf/cistern/pagecache"
	"github.com/cistern-ebpf/cistern/pagecache/pctrace"
)

func newCacheTraceCmd() *cobra.Command {
	var (
		cfg        pagecache.RecordConfig
		limit, out string
		duration   time.Duration
	)
	c := &cobra.Command{
		Use:   "trace --cgroup PATH [--limit SIZE] --dir DIR --out FILE [--duration D]",
		Short: "Record a cgroup's page-cache access trace (for cache headroom)",
		Long: `trace records, for the files under DIR charged to a memory cgroup, every
folio the kernel adds to and deletes from the page cache and every page a
buffered read is served from, in order, into FILE (0600; the format is
package pctrace's). Nothing is evicted: the kernel's own policy runs, and
the workload pays only the tracepoints (the page-cache bench reports it as
probe_effect_pct). Stops after --duration, or on SIGINT/SIGTERM, and prints
the trace's summary; 'cistern cache headroom --trace FILE' then replays it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Cgroup == "" || cfg.Dir == "" || out == "" {
				return cli.Usagef("--cgroup, --dir and --out are required")
			}
			if limit != "" {
				n, err := size.Parse(limit)
				if err != nil {
					return cli.Usagef("--limit: %v", err)
				}
				cfg.Limit = n
			}
			if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
				return cli.Usagef("--dir %s: not a directory", cfg.Dir)
			}
			if err := cli.RequireRoot("cistern cache trace"); err != nil {
				return err
			}
			if err := rlimit.RemoveMemlock(); err != nil {
				return fmt.Errorf("remove memlock limit: %w", err)
			}
			f, err := cli.CreatePrivate(out)
			if err != nil {
				return err
			}
			defer f.Close()
			w, err := pctrace.NewWriter(f)
			if err != nil {
				return err
			}
			r, err := pagecache.StartRecorder(cfg)
			if err != nil {
				return err
			}
			defer r.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "trace: cgroup %s, files under %s, into %s; Ctrl-C stops\n", r.Cgroup().Path, cfg.Dir, out)
			if err := r.Run(ctx, w); err != nil {
				return err
			}
			st, err := r.Stats()
			if err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("write %s: %w", out, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d events written, %d lost (ring buffer full), %d files\n",
				w.N, st["events_dropped"], len(r.Files()))
			if st["events_dropped"] > 0 {
				return fmt.Errorf("the trace lost %d events: its figures are not exact", st["events_dropped"])
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&cfg.Cgroup, "cgroup", "", "memory cgroup: a path in the cgroup filesystem, or relative to the memory hierarchy's root")
	fl.StringVar(&limit, "limit", "", "create the cgroup with this memory limit (e.g. 512M, 2G)")
	fl.StringVar(&cfg.Dir, "dir", "", "directory whose files are traced")
	fl.StringVar(&out, "out", "", "trace FILE to write (created 0600)")
	fl.DurationVar(&duration, "duration", 0, "stop after this long (default: until SIGINT)")
	return c
}

func newCacheHeadroomCmd() *cobra.Command {
	var (
		tracePath, jsonPath string
		size                int
		warmup              float64
	)
	c := &cobra.Command{
		Use:   "headroom --trace FILE [--size PAGES] [--json FILE]",
		Short: "Replay a page-cache trace under every policy, the kernel's default and Belady's OPT",
		Long: `headroom replays a trace written by 'cistern cache trace' at one cache
size (default: the most pages the run held at once) under Belady's OPT
(the limit no policy can pass), a model of the kernel's default page cache
(active and inactive lists with refault detection; package evict/sim says
what it leaves out) and every page-cache policy, replayed in the kernel
with the very objects the agent runs. It prints each one's misses per 1000
reads beside the trace's own pages loaded per 1000 reads (the live figure),
and two frequency references between the kernel model and OPT:
history_lfu, LFU counting every page ever read (what counting can learn
online), and oracle_lfu, LFU knowing each page's count in advance (on a
workload of independent draws, the best any online policy can do).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tracePath == "" {
				return cli.Usagef("--trace is required")
			}
			if warmup < 0 || warmup >= 1 {
				return cli.Usagef("--warmup %g: want a fraction from 0 to below 1", warmup)
			}
			if size < 0 {
				return cli.Usagef("--size %d: want a number of pages", size)
			}
			evs, err := pctrace.ReadFile(tracePath)
			if err != nil {
				if errors.Is(err, pctrace.ErrFormat) || errors.Is(err, pctrace.ErrTruncated) || os.IsNotExist(err) {
					return cli.Usagef("--trace: %v", err)
				}
				return err
			}
			if err := cli.RequireRoot("cistern cache headroom"); err != nil {
				return err
			}
			if err := rlimit.RemoveMemlock(); err != nil {
				return fmt.Errorf("remove memlock limit: %w", err)
			}
			keys, from, s := pctrace.Accesses(evs, warmup)
			if size == 0 {
				size = int(s.MaxResident)
			}
			if size == 0 || s.Reads == 0 {
				return cli.Usagef("--trace %s holds no reads or no loaded pages: nothing to replay (give --size)", tracePath)
			}
			rep, err := sim.Headroom(keys, from, s.Reads, size, pagecache.SimPolicies())
			if err != nil {
				return err
			}
			printHeadroom(cmd.OutOrStdout(), s, rep)
			if jsonPath != "" {
				return cli.WriteJSON(jsonPath, struct {
					Trace pctrace.Summary `json:"trace"`
					sim.Report
				}{s, rep})
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&tracePath, "trace", "", "trace FILE written by cistern cache trace")
	fl.IntVar(&size, "size", 0, "cache size in pages (default: the most pages the run held)")
	fl.Float64Var(&warmup, "warmup", 0.5, "fraction of the reads that warm the caches before misses count (live and simulated alike)")
	fl.StringVar(&jsonPath, "json", "", "write the result as JSON to FILE (- for stdout)")
	return c
}

func printHeadroom(w io.Writer, s pctrace.Summary, r sim.Report) {
	fmt.Fprintf(w, "%d reads measured after %d warming (%d page reads), %d files, cache %d pages; live: %.1f pages loaded per 1000 reads\n",
		s.Reads, s.WarmupReads, s.PageReads, s.Files, r.CapacityPages, s.LoadedPer1000Reads())
	fmt.Fprintf(w, "%-12s %14s %10s %10s\n", "cache", "misses/1000rd", "vs OPT", "vs kernel")
	for _, f := range append([]sim.Figure{r.OPT, r.OracleLFU, r.HistoryLFU, r.Kernel}, r.Policies...) {
		fmt.Fprintf(w, "%-12s %14.1f %10.2f %10.2f\n", f.Name, f.MissesPer1000Reads, f.VsOPT, f.VsKernel)
	}
	fmt.Fprintf(w, "best policy: %s, %.1f%% fewer misses than the kernel model\n", r.Best, r.BestGainPct)
}
