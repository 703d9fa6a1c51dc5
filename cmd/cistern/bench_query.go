package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	querybench "github.com/cistern-ebpf/cistern/bench/query"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

func newBenchQueryCmd() *cobra.Command {
	var bf benchFlags
	var opt querybench.Options
	c := &cobra.Command{
		Use:   "query [--quick] [--workload fio|rocksdb] [--json FILE] [--plot FILE.png]",
		Short: "SQL queries against hand-written eBPF and bpftrace",
		Long: `Runs fio (4 KiB random reads, ioengine=psync, on a 64 MiB file in the page
cache) in its own cgroup, untraced and under two queries on the syscalls
table, every mode filtered to that cgroup:
  q1  SELECT pid, syscall, MAX(latency_ns) ... GROUP BY pid, syscall WINDOW 1s
  q2  SELECT pid, tid, syscall, latency_ns ... written to a file
Modes, side by side in one run: hand_written (Cistern's reference eBPF + Go),
bpftrace, optimizer and mvsf_only (the query compiler; skipped with a note
until it is available). Reports the probe effect (fio IOPS drop), events,
lost events, Q2's rows against fio's own read count, and whether each
mode's Q1 maxima agree with the reference on the same syscalls.
--workload rocksdb: db_bench readrandom (Debian's rocksdb-tools), one thread,
on a 1 GiB database read into the page cache (block cache 8 MiB: a pread64
per Get), as the verifier-safe-DSL paper measured on RocksDB; Q2's rows
are checked against db_bench's own read syscalls (/proc/PID/io syscr).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := querybench.CheckOptions(opt); err != nil {
				return cli.Usagef("%v", err)
			}
			return bf.run(cmd, func(ctx context.Context, progress func(string)) (*benchkit.Report, error) {
				opt.Quick, opt.PlotPath, opt.Progress = bf.quick, bf.plotPath, progress
				return querybench.Run(ctx, opt)
			})
		},
	}
	bf.add(c)
	c.Flags().DurationVar(&opt.Runtime, "runtime", 0, "fio runtime per run (default 3s, quick 1s)")
	c.Flags().IntVar(&opt.Rounds, "rounds", 0, "interleaved rounds; medians are reported (default 5, quick 3)")
	c.Flags().StringSliceVar(&opt.Modes, "modes", nil, "traced modes (default "+strings.Join(querybench.Modes, ",")+")")
	c.Flags().StringSliceVar(&opt.Queries, "queries", nil, "queries (default q1,q2)")
	c.Flags().StringVar(&opt.Workload, "workload", "fio", "fio, or rocksdb (db_bench readrandom on a 1 GiB database in the page cache; probe effect = drop of its ops/s)")
	c.Flags().StringVar(&opt.CacheDir, "cache-dir", "", "rocksdb: where the database is built once (default /var/cache/cistern/pagecache/rocksdb)")
	return c
}
