package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/bench"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

func newBenchCmd() *cobra.Command {
	return group("bench", "Benchmarks: print a table, write JSON, draw a PNG",
		newBenchKVCmd(),
		newBenchCaptureCmd(),
		newBenchCacheCmd(),
		newBenchPagecacheCmd(),
		newBenchCBufCmd(),
		newBenchQueryCmd(),
		newBenchCompareCmd())
}

// benchFlags are the flags every benchmark shares.
type benchFlags struct {
	quick    bool
	jsonPath string
	plotPath string
}

func (b *benchFlags) add(c *cobra.Command) {
	c.Flags().BoolVar(&b.quick, "quick", false, "a run of under a minute that still compares every mode")
	c.Flags().StringVar(&b.jsonPath, "json", "", "write the results as JSON to FILE")
	c.Flags().StringVar(&b.plotPath, "plot", "", "draw the results as a PNG to FILE")
}

// run is the body every bench command shares: root, Ctrl-C, progress
// lines, wall time, then the table and the JSON.
func (b *benchFlags) run(cmd *cobra.Command, fn func(ctx context.Context, progress func(string)) (*benchkit.Report, error)) error {
	if err := cli.RequireRoot(cmd.CommandPath()); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := fn(ctx, func(s string) { benchkit.Step("%s", s) })
	if err != nil {
		return err
	}
	rep.SetConfig("wall_seconds", time.Since(start).Seconds())
	return b.finish(cmd, rep)
}

// finish prints the table and writes the JSON; the plot is the bench's own.
func (b *benchFlags) finish(cmd *cobra.Command, rep *benchkit.Report) error {
	rep.WriteTable(cmd.OutOrStdout())
	if b.plotPath != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", b.plotPath)
	}
	if b.jsonPath != "" {
		if err := rep.WriteJSON(b.jsonPath); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", b.jsonPath)
	}
	return nil
}

func newBenchKVCmd() *cobra.Command {
	var bf benchFlags
	var opt bench.KVOptions
	var topt bench.KVTraceOptions
	c := &cobra.Command{
		Use:   "kv [--quick] [--json FILE] [--plot FILE.png] [--trace twitter]",
		Short: "Kerby-KV against memcached alone and fixed-size slots",
		Long: `Sets up a server and a client network namespace joined by veth, starts a
real memcached (UDP) in the server namespace and drives it from the client
namespace: 8-byte keys, values 75% 128 B and 25% 1024 B, zipfian
popularity. Modes: vanilla (memcached alone), fixed128, fixed1024 (one slot
per key) and kerby, plus a bare XDP_TX reflector (the path's ceiling).
Two load generators: the kernel one (BPF_PROG_RUN with XDP live frames, the
technique of xdp-trafficgen; replies counted, checked and dropped by XDP on
the client's veth), which gives the headline rows, and the Go one (rows
"user-space MODE"). Modes run interleaved for several rounds (5, --quick 3);
the table shows median [min-max]; targets are judged on medians. Every
reply's value is checked.
` + kvTraceHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if run := kvTraceRunner(cmd, &bf, &topt); run != nil {
				return run()
			}
			return bf.run(cmd, func(ctx context.Context, progress func(string)) (*benchkit.Report, error) {
				opt.Quick, opt.PlotPath, opt.Progress = bf.quick, bf.plotPath, progress
				return bench.KV(ctx, opt)
			})
		},
	}
	bf.add(c)
	c.Flags().IntVar(&opt.Keys, "keys", 0, "distinct keys (default 100000, quick 20000)")
	c.Flags().DurationVar(&opt.Phase, "phase", 0, "length of each user-space client phase (default 5s, quick 2s)")
	c.Flags().DurationVar(&opt.GenPhase, "gen-phase", 0, "length of each kernel generator phase (default 3s, quick 2s)")
	c.Flags().IntVar(&opt.Rounds, "rounds", 0, "interleaved rounds (default 5, quick 3)")
	c.Flags().StringSliceVar(&opt.Clients, "clients", nil, "load generators: kernel, user-space (default both)")
	c.Flags().IntVar(&opt.Workers, "workers", 0, "load generator workers (default 2, one per core)")
	c.Flags().IntVar(&opt.Depth, "depth", 0, "outstanding requests per worker (default 32)")
	c.Flags().IntVar(&opt.Batch, "batch", 0, "datagrams per sendmmsg/recvmmsg (default 16)")
	c.Flags().StringSliceVar(&opt.Modes, "modes", nil, "modes to run (default vanilla,fixed128,fixed1024,kerby)")
	c.Flags().BoolVar(&opt.Native, "native", false, "native XDP for the user-space client rows too (on veth, generic is faster there)")
	addKVTraceFlags(c, &topt)
	return c
}
