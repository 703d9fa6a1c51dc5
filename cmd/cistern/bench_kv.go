package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	kvbench "github.com/cistern-ebpf/cistern/bench/kv"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

func newBenchKVCmd() *cobra.Command {
	var bf benchFlags
	var opt kvbench.Options
	var topt kvbench.TraceOptions
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
				return kvbench.Run(ctx, opt)
			})
		},
	}
	bf.add(c)
	c.Flags().IntVar(&opt.Keys, "keys", 0, "distinct keys (default 100000, quick 20000)")
	c.Flags().DurationVar(&opt.Phase, "phase", 0, "length of each user-space client phase (default 5s, quick 2s)")
	c.Flags().DurationVar(&opt.GenPhase, "gen-phase", 0, "length of each kernel generator phase (default 3s, quick 2s)")
	c.Flags().IntVar(&opt.Rounds, "rounds", 0, "interleaved rounds (default 5, quick 3)")
	c.Flags().StringSliceVar(&opt.Clients, "clients", nil, "load generators: kernel, user-space (UDP), tcp (default all three)")
	c.Flags().IntVar(&opt.Workers, "workers", 0, "load generator workers (default 2, one per core)")
	c.Flags().IntVar(&opt.Depth, "depth", 0, "outstanding requests per worker (default 32)")
	c.Flags().IntVar(&opt.Batch, "batch", 0, "datagrams per sendmmsg/recvmmsg (default 16)")
	c.Flags().IntVar(&opt.TCPConns, "tcp-conns", 0, "connections of the TCP client (default 16)")
	c.Flags().IntVar(&opt.TCPDepth, "tcp-depth", 0, "GETs the TCP client writes at once per connection (default 4)")
	c.Flags().Float64Var(&opt.TCPHits, "tcp-hits", 0, "share of the TCP client's GETs for keys that exist (default 0.9; the rest are misses everywhere)")
	c.Flags().StringSliceVar(&opt.Modes, "modes", nil, "modes to run (default "+strings.Join(kvbench.Modes, ",")+")")
	c.Flags().BoolVar(&opt.Native, "native", false, "native XDP for the user-space client rows too (on veth, generic is faster there)")
	addKVTraceFlags(c, &topt)
	return c
}

const kvTraceHelp = `With --trace twitter it instead replays the Twitter trace (cluster 52) against
Kerby-KV look-aside (GET; on a memcached miss, SET) once per eviction policy
at one pool size (--pool-mb, default 4; quick: 1 MiB and the first 100,000
requests, policies fifo, lru, s3fifo) and reports the kernel hit ratio per
policy beside an offline replay with the same block budget.`

var kvTraceName string

func addKVTraceFlags(c *cobra.Command, o *kvbench.TraceOptions) {
	f := c.Flags()
	f.StringVar(&kvTraceName, "trace", "", "trace mode: twitter (the bundled cluster-52 trace)")
	f.StringSliceVar(&o.Policies, "policies", nil, "trace mode: policies (default ring and every policy; ring is the built-in FIFO ring)")
	f.Uint32Var(&o.PoolMB, "trace-pool-mb", 0, "trace mode: pool size in MiB (default 4, quick 1)")
	f.IntVar(&o.Requests, "requests", 0, "trace mode: replay only the first N requests")
}

// kvTraceRunner returns the trace-mode run of bench kv, or nil without --trace.
func kvTraceRunner(cmd *cobra.Command, bf *benchFlags, o *kvbench.TraceOptions) func() error {
	if kvTraceName == "" {
		return nil
	}
	return func() error {
		if kvTraceName != "twitter" {
			return cli.Usagef("--trace %q: only twitter is bundled", kvTraceName)
		}
		return bf.run(cmd, func(ctx context.Context, progress func(string)) (*benchkit.Report, error) {
			o.Quick, o.PlotPath, o.Progress = bf.quick, bf.plotPath, progress
			return kvbench.Trace(ctx, *o)
		})
	}
}
