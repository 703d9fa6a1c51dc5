package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/cache"
	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

func newCacheReplayCmd() *cobra.Command {
	var (
		tracePath, format, policy, unit, jsonPath string
		size                                      uint64
	)
	c := &cobra.Command{
		Use:   "replay --trace FILE --format FORMAT --policy NAME --size N",
		Short: "Replay a cache trace through in-kernel eviction policies",
		Long: `replay runs a trace through an eviction policy in the kernel: the very
BPF policy object, its programs run with BPF_PROG_TEST_RUN over
batches of 4096 requests looped over in the kernel. Block traces
(cloudphysics, arc) become one request per 512-byte block. Traces may be
zstd-compressed. Formats: ` + strings.Join(cache.Formats, ", ") + ` (csv: key,size).
--unit bytes makes --size a budget of bytes (object sizes from the trace;
an object larger than the budget is never admitted).
Policies: fifo, lru, mru, clock, sieve, s3fifo, lfu, lhd.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tracePath == "" || format == "" || policy == "" || size == 0 {
				return cli.Usagef("--trace, --format, --policy and --size are required")
			}
			if !cache.ValidFormat(format) {
				return cli.Usagef("--format %q: want one of %s", format, strings.Join(cache.Formats, ", "))
			}
			if _, err := evict.Spec(policy); err != nil || policy == "broken" {
				return cli.Usagef("--policy %q: want one of fifo, lru, mru, clock, sieve, s3fifo, lfu, lhd", policy)
			}
			if unit != "objects" && unit != "bytes" {
				return cli.Usagef("--unit %q: want objects or bytes", unit)
			}
			if err := cli.RequireRoot("cistern cache replay"); err != nil {
				return err
			}
			if err := rlimit.RemoveMemlock(); err != nil {
				return fmt.Errorf("remove memlock limit: %w", err)
			}
			reqs, err := cache.ReadFile(tracePath, format)
			if err != nil {
				if os.IsNotExist(err) {
					return cli.Usagef("--trace: %v", err)
				}
				return cli.Usagef("read trace: %v", err)
			}
			res, err := cache.Replay(reqs, cache.Options{Policy: policy, Size: size, Unit: unit, Trace: filepath.Base(tracePath)})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s size %d %s: %d requests, hit ratio %.4f, byte hit ratio %.4f, %.0f requests/s, %d fallbacks\n",
				res.Policy, res.Trace, res.CacheSize, res.Unit, res.Requests, res.HitRatio, res.ByteHitRatio, res.RequestsPerSec, res.Fallbacks)
			if jsonPath != "" {
				return cli.WriteJSON(jsonPath, res)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&tracePath, "trace", "", "trace FILE (plain or zstd-compressed)")
	f.StringVar(&format, "format", "", "trace format: "+strings.Join(cache.Formats, "|"))
	f.StringVar(&policy, "policy", "", "eviction policy: "+strings.Join(slices.DeleteFunc(evict.Policies(), func(p string) bool { return p == "broken" }), "|"))
	f.Uint64Var(&size, "size", 0, "cache size in --unit")
	f.StringVar(&unit, "unit", "objects", "unit of --size: objects (each counts 1) or bytes (request sizes)")
	f.StringVar(&jsonPath, "json", "", "write the result as JSON to FILE (- for stdout)")
	return c
}

func newBenchCacheCmd() *cobra.Command {
	var bf benchFlags
	var traceDir string
	c := &cobra.Command{
		Use:   "cache [--quick] [--json FILE] [--plot FILE.png]",
		Short: "Eviction policies over bundled traces",
		Long: `Replays the bundled traces (Twitter cluster 52, ARC OLTP, CloudPhysics;
found in $CISTERN_TRACES, else shared/data/traces beside the repository)
through every in-kernel eviction policy (fifo, lru, mru, clock, sieve,
s3fifo, lfu, lhd) at cache sizes of 1%, 5%, 10% and 25% of each trace's distinct
objects. Modes are policies; metrics are the hit ratio per trace and size
(TRACE_hit_ratio_Npct) and the replay rate per trace. --plot draws the
miss-ratio curves, one PNG per trace (FILE-TRACE.png). --quick replays the
Twitter and ARC traces at 1% and 10%.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.RequireRoot("cistern bench cache"); err != nil {
				return err
			}
			if err := rlimit.RemoveMemlock(); err != nil {
				return fmt.Errorf("remove memlock limit: %w", err)
			}
			if traceDir == "" {
				traceDir = cache.TraceDir()
			}
			bundled, pcts := cache.Bundled, []float64{1, 5, 10, 25}
			if bf.quick {
				bundled, pcts = bundled[:2], []float64{1, 10}
			}
			start := time.Now()
			var traces []cache.BenchTrace
			for _, b := range bundled {
				path := filepath.Join(traceDir, b.File)
				benchkit.Step("reading %s", path)
				reqs, err := cache.ReadFile(path, b.Format)
				if err != nil {
					if os.IsNotExist(err) {
						return cli.Usagef("bundled trace missing (set $CISTERN_TRACES): %v", err)
					}
					return fmt.Errorf("read %s: %w", path, err)
				}
				traces = append(traces, cache.BenchTrace{Name: b.Name, Reqs: reqs})
			}
			rep, curves, err := cache.Bench(cache.BenchOptions{
				Traces: traces, Percents: pcts, Quick: bf.quick,
				Progress: func(s string) { benchkit.Step("%s", s) },
			})
			if err != nil {
				return err
			}
			rep.SetConfig("wall_seconds", time.Since(start).Seconds())
			plotPath := bf.plotPath
			bf.plotPath = "" // one file per trace: reported here
			if plotPath != "" {
				paths, err := cache.PlotCurves(plotPath, curves)
				if err != nil {
					return err
				}
				for _, p := range paths {
					fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", p)
				}
			}
			return bf.finish(cmd, rep)
		},
	}
	bf.add(c)
	c.Flags().StringVar(&traceDir, "traces", "", "directory of the bundled traces (default $CISTERN_TRACES or shared/data/traces)")
	return c
}
