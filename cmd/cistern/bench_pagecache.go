package main

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	pagecachebench "github.com/cistern-ebpf/cistern/bench/pagecache"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

func newBenchPagecacheCmd() *cobra.Command {
	var bf benchFlags
	var opt pagecachebench.Options
	c := &cobra.Command{
		Use:   "pagecache [--quick] [--workload synthetic|rocksdb|ycsb] [--json FILE] [--plot FILE.png]",
		Short: "Page-cache agent against the kernel LRU",
		Long: `Three parts, each against the kernel's own LRU in a memory cgroup:
search:   10 ripgrep searches over the Linux source (Debian linux-source-6.1,
          unpacked once into --cache-dir) in a cgroup limited to 70% of
          the tree: default vs agent_mru (target search_speedup_mru >= 1.5).
getscan:  a GET thread doing random 4 KiB preads over a hot file (9/16
          of the cgroup's limit) and a scanner process reading a large
          file, in one cgroup (on the cache dir's disk;
          --getscan-ramdisk: on a RAM-backed loop device, where a miss
          costs little): default,
          agent_get_scan, fadvise_noreuse, fadvise_dontneed (target
          get_speedup >= 1.3 with scan throughput >= 0.7 of default).
overhead: fio randread psync on a cached file, agent off vs on with the
          no-op policy (target cpu_per_io_overhead_pct <= 3).
--workload rocksdb: RocksDB's own db_bench (Debian's rocksdb-tools) on a
database 4x the cgroup's limit (4 GiB at 1 GiB; --quick 1 GiB at 256 MiB),
built once into --cache-dir/rocksdb; block cache 8 MiB, reads by pread.
Parts (--parts): reads (skewed readrandom, --read_random_exp_range=5, 4
threads: default vs agent lfu, s3fifo, lhd; targets: best >= 1.2x ops/s
and P99 <= 0.8x default, agent CPU <= 3% of a core per 10k reads/s, shown
beside its floor: posix_fadvise's cost for the pages loaded, measured),
getscan (readrandom GETs beside a seekrandom scan process: default,
agent_get_scan, fadvise_noreuse, fadvise_dontneed on the scan; targets GETs
>= 1.5x, scan >= 0.8x), percgroup (rocksdb and the ripgrep search in two
cgroups at once, RocksDB measured 30 s: default, global_lfu, global_mru,
tailored = LFU + MRU; target each >= 1.2x its default and at least as good
as under either global policy, within 5%).
--workload ycsb: YCSB's own workloads and generators (go-ycsb v1.0.3, built
with its RocksDB binding by make deps) against RocksDB, block cache 8 MiB,
reads by pread, in a cgroup a quarter of the database (loaded once into
--cache-dir/ycsb: 1 GiB cgroup; --quick 128 MiB). Workloads (--parts): a, b,
c, d, f (YCSB's mixes; zipfian = YCSB's scrambled zipfian, D latest) and
uniform (C's reads, uniform keys); --quick runs c only. Modes: default,
traced (the default with the access-trace recorder on: its trace replayed
gives each policy's simulated misses, the kernel model's and OPT's), agent
lfu, s3fifo, lhd, wtinylfu, auto; ops/s, read P99, pages loaded per 1000
operations, and each agent's pages loaded against its policy simulated on
the round's trace at the agent's own cache size (live_vs_sim <= 1.05);
each agent's CPU per 10k ops (the largest <= 3%, beside the floor).
Targets, on the simulation (as every part's): a policy saving >= 15% of the
kernel model's misses gives >= 1.2x ops/s with P99 <= 0.8x, else the bench
says there is no headroom. Each round: a warm-up go-ycsb (16 threads, 20
s; --quick 6 s), then the measured one (4 threads, 10 s; --quick 4 s). --quick cannot finish
in 60 s: 7 modes x 3 rounds of two go-ycsb processes, each opening RocksDB,
plus the agent's start, take about 3 minutes (plus the load, once: ~1 min);
the warm-up trains the policies (the cgroup is full within 3 s).
Every part but overhead also runs agent_auto (--policy auto; per-cgroup:
an auto in each cgroup), between two default runs in getscan, rocksdb's
getscan and percgroup, zipf and ycsb: targets PART_auto_vs_default >= 0.97
on the part's measure (PART_auto_cost_bound >= 0.97, its measured CPU,
where it stood aside in every round) and PART_auto_vs_best_fixed >= 0.8.
Files are dropped from the page cache (fadvise DONTNEED) before each mode.
Modes run interleaved for 5 rounds (--quick 3); ratios are medians of the
rounds' ratios. The overhead target is the agent's own cost (BPF run time
plus its thread's CPU) within each agent run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch opt.Workload {
			case "", "synthetic":
				opt.Workload = ""
				for _, p := range opt.Parts {
					if !slices.Contains(pagecachebench.Parts, p) {
						return cli.Usagef("--parts %q: want %s", p, strings.Join(pagecachebench.Parts, ", "))
					}
				}
			case "rocksdb":
				for _, p := range opt.Parts {
					if !slices.Contains(pagecachebench.RocksDBParts, p) {
						return cli.Usagef("--parts %q: with --workload rocksdb want %s", p, strings.Join(pagecachebench.RocksDBParts, ", "))
					}
				}
			case "ycsb":
				for _, p := range opt.Parts {
					if !slices.Contains(pagecachebench.YCSBWorkloadNames(), p) {
						return cli.Usagef("--parts %q: with --workload ycsb want %s", p, strings.Join(pagecachebench.YCSBWorkloadNames(), ", "))
					}
				}
			default:
				return cli.Usagef("--workload %q: want synthetic, rocksdb or ycsb", opt.Workload)
			}
			return bf.run(cmd, func(ctx context.Context, progress func(string)) (*benchkit.Report, error) {
				opt.Quick, opt.PlotPath, opt.Progress = bf.quick, bf.plotPath, progress
				return pagecachebench.Run(ctx, opt)
			})
		},
	}
	bf.add(c)
	c.Flags().StringVar(&opt.CacheDir, "cache-dir", "", "where the Linux tree and data files are kept (default /var/cache/cistern/pagecache)")
	c.Flags().StringSliceVar(&opt.Parts, "parts", nil, "parts to run (default "+strings.Join(pagecachebench.Parts, ",")+"; rocksdb: "+strings.Join(pagecachebench.RocksDBParts, ",")+"; ycsb: "+strings.Join(pagecachebench.YCSBWorkloadNames(), ",")+")")
	c.Flags().StringVar(&opt.Workload, "workload", "synthetic", "synthetic (ripgrep, a GET thread, fio), rocksdb (db_bench) or ycsb (go-ycsb on RocksDB)")
	c.Flags().BoolVar(&opt.GetScanRAMDisk, "getscan-ramdisk", false, "run getscan on a RAM-backed loop device (misses cost little: a diagnostic)")
	return c
}
