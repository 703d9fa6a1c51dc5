package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	capturebench "github.com/cistern-ebpf/cistern/bench/capture"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

func newBenchCaptureCmd() *cobra.Command {
	var bf benchFlags
	var opt capturebench.Options
	c := &cobra.Command{
		Use:   "capture [--quick] [--json FILE] [--plot FILE.png]",
		Short: "Accumulated against naive capture",
		Long: `Starts PostgreSQL with TLS on loopback (a throwaway certificate), initialises
it with pgbench -i -s 1 and drives it with pgbench -S (select-only) at full
rate. Modes, side by side in one run: untraced (baseline), naive (one fixed
1 KiB ring record per SSL fragment), accumulated (Cistern's channel), each
traced mode with 256 KiB and 4 MiB (_4m) rings, and bpftrace counting the
same uprobes (skipped with a note when bpftrace is missing). The sysbench
modes run MariaDB over TLS with sysbench oltp_point_select (prepared
statements), untraced and captured with --protocol mysql. churn: 160 short
TLS connections with big answers, both sides captured by cgroup. attach:
exec (or libssl open) to uprobes attached, median and p99 over 200 execs of
new copies of a Go program and of a libssl, and the start-up time
--hold-new adds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bf.run(cmd, func(ctx context.Context, progress func(string)) (*benchkit.Report, error) {
				opt.Quick, opt.PlotPath, opt.Progress = bf.quick, bf.plotPath, progress
				return capturebench.Run(ctx, opt)
			})
		},
	}
	bf.add(c)
	c.Flags().DurationVar(&opt.Duration, "duration", 0, "pgbench run per mode (default 15s, quick 5s)")
	c.Flags().IntVar(&opt.Clients, "clients", 0, "pgbench clients and threads (default 2)")
	c.Flags().Uint32Var(&opt.ChurnRing, "churn-ring-size", 0, "churn mode: ring buffer bytes (default: cistern capture's default)")
	c.Flags().BoolVar(&opt.HoldNew, "hold-new", false, "accumulated and churn modes: capture with --hold-new")
	c.Flags().IntVar(&opt.AttachExecs, "attach-execs", 0, "attach mode: execs of each kind (Go, libssl) over all rounds (default 200)")
	c.Flags().IntVar(&opt.Port, "port", 0, "PostgreSQL port (default 54339; MariaDB Port+1, churn Port+7): another when a run elsewhere on this machine holds it")
	c.Flags().StringSliceVar(&opt.Modes, "modes", nil, "modes to run (default: all of "+strings.Join(capturebench.Modes, ",")+")")
	return c
}
