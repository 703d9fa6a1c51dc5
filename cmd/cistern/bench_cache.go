package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"

	cachebench "github.com/cistern-ebpf/cistern/bench/cache"
	"github.com/cistern-ebpf/cistern/evict/replay"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

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
				traceDir = replay.TraceDir()
			}
			bundled, pcts := cachebench.Workload(bf.quick)
			start := time.Now()
			var traces []cachebench.Trace
			for _, b := range bundled {
				path := filepath.Join(traceDir, b.File)
				benchkit.Step("reading %s", path)
				reqs, err := replay.ReadFile(path, b.Format)
				if err != nil {
					if os.IsNotExist(err) {
						return cli.Usagef("bundled trace missing (set $CISTERN_TRACES): %v", err)
					}
					return fmt.Errorf("read %s: %w", path, err)
				}
				traces = append(traces, cachebench.Trace{Name: b.Name, Reqs: reqs})
			}
			rep, curves, err := cachebench.Run(cachebench.Options{
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
				paths, err := cachebench.PlotCurves(plotPath, curves)
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
