package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	cbufbench "github.com/cistern-ebpf/cistern/bench/cbuf"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

func newBenchCBufCmd() *cobra.Command {
	var bf benchFlags
	var opt cbufbench.Options
	c := &cobra.Command{
		Use:   "cbuf [--quick] [--json FILE] [--plot FILE.png]",
		Short: "CBUF against malloc, pipes, sockets and iceoryx2; pool policies",
		Long: `Builds libcbuf and its C peers with cc (and the iceoryx2 peer with cargo,
from crates.io, into /var/cache/cistern/cbuf or $CISTERN_CACHE/cbuf) and runs
an in-process manager for each experiment:
  fast_*          cached cbuf_alloc/free/send/cbuf2buf ns for 1-64 pages beside
                  glibc and jemalloc malloc+free
  MODE rtt_us_Np  round trip between two processes, N pages each way:
                  cbuf_poll, cbuf_block (futex), pipe, unix_socket,
                  iceoryx2_poll, iceoryx2_block (event listener); the
                  blocking ones also as MODE_1core (both processes on CPU 0);
                  each value is the median of interleaved rounds (15; quick 9)
  alloc_vs_pool   1-page allocation cost with collection against pool size
                  (the paper's Figure 7)
  policy_*        producer -> consumer plus an interfering allocator under
                  max-throughput, priority and qos; --plot draws the producer's
                  throughput over time (and FILE-rtt.png the round trips).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bf.run(cmd, func(ctx context.Context, progress func(string)) (*benchkit.Report, error) {
				opt.Quick, opt.PlotPath, opt.Progress = bf.quick, bf.plotPath, progress
				return cbufbench.Run(ctx, opt)
			})
		},
	}
	bf.add(c)
	c.Flags().StringSliceVar(&opt.Parts, "parts", nil, "experiments to run (default "+strings.Join(cbufbench.Parts, ",")+")")
	c.Flags().BoolVar(&opt.NoIox2, "no-iceoryx2", false, "skip the iceoryx2 modes (no cargo or no crates.io)")
	c.Flags().StringVar(&opt.Workload, "workload", "ipc", "ipc (the parts above) or web: cbufweb against nginx and Apache with FastCGI under wrk\n(parts servers, send, contention; examples/cbufweb)")
	return c
}
