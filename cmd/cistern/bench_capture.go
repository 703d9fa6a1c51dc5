package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/bench"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

func newBenchCaptureCmd() *cobra.Command {
	var bf benchFlags
	var opt bench.CaptureOptions
	c := &cobra.Command{
		Use:   "capture [--quick] [--json FILE] [--plot FILE.png]",
		Short: "Accumulated against naive capture",
		Long: `Starts PostgreSQL with TLS on loopback (a throwaway certificate), initialises
it with pgbench -i -s 1 and drives it with pgbench -S (select-only) at full
rate. Modes, side by side in one run: untraced (baseline), naive (one fixed
1 KiB ring record per SSL fragment), accumulated (Cistern's channel), each
traced mode with 256 KiB and 4 MiB (_4m) rings, and bpftrace counting the
same uprobes (skipped with a note when bpftrace is missing).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.RequireRoot("cistern bench capture"); err != nil {
				return err
			}
			opt.Quick = bf.quick
			opt.PlotPath = bf.plotPath
			opt.Progress = func(s string) { benchkit.Step("%s", s) }
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			rep, err := bench.Capture(ctx, opt)
			if err != nil {
				return err
			}
			rep.SetConfig("wall_seconds", time.Since(start).Seconds())
			return bf.finish(cmd, rep)
		},
	}
	bf.add(c)
	c.Flags().DurationVar(&opt.Duration, "duration", 0, "pgbench run per mode (default 15s, quick 5s)")
	c.Flags().IntVar(&opt.Clients, "clients", 0, "pgbench clients and threads (default 2)")
	c.Flags().StringSliceVar(&opt.Modes, "modes", nil, "modes to run (default untraced,naive,accumulated,naive_4m,accumulated_4m,bpftrace)")
	return c
}
