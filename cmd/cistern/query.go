package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/internal/plot"
	"github.com/cistern-ebpf/cistern/query"
	"github.com/cistern-ebpf/cistern/query/exporter"
)

func newQueryRunCmd() *cobra.Command {
	var (
		duration time.Duration
		format   string
		outPath  string
		explain  bool
		schema   bool
		mode     string
		maddr    string
		plotPath string
		serve    string
		name     string
		window   time.Duration
		maxSer   int
	)
	c := &cobra.Command{
		Use:   "query 'SQL' [--duration D] [--format table|json|csv] [--out FILE] [--explain] [--plot F.png] [--metrics ADDR] | --serve ADDR | --schema",
		Short: "SQL over kernel events, compiled to eBPF",
		Long: `query runs one SELECT over kernel events. The kernel part is built only
from operator templates verified ahead of time, so every query that passes
the checks loads; an optimizer pushes filters, projection, the entry/exit
join and partial aggregation into the kernel when that is cheaper.

  SELECT <expr [AS name], ...> FROM <table> [WHERE ...] [GROUP BY ...]
    [WINDOW <n>s|<n>ms] [HAVING ...] [ORDER BY ... [ASC|DESC]] [LIMIT n]

Aggregates: COUNT(*), COUNT(x), SUM, MIN, MAX, AVG, HIST (log2 buckets,
drawn as bars in the table format; numbers in JSON and CSV),
QUANTILE(x, 0.99) (exact up to 65536 values per group, then sampled),
COUNT(DISTINCT x) (exact, kept in user space). Without WINDOW, aggregates
are printed at the end of --duration or on Ctrl-C. 'cistern query --schema'
lists the tables and columns; docs/query.md has the details.`,
		Example: `  cistern query "SELECT syscall, COUNT(*) AS n FROM syscalls GROUP BY syscall ORDER BY n DESC LIMIT 10" --duration 5s
  cistern query "SELECT pid, syscall, MAX(latency_ns) FROM syscalls WHERE comm = 'fio' GROUP BY pid, syscall WINDOW 1s" --explain`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if schema {
				if len(args) > 0 {
					return cli.Usagef("--schema takes no query")
				}
				query.Schema(cmd.OutOrStdout())
				return nil
			}
			if len(args) != 1 {
				return cli.Usagef("give one query in quotes, or --schema (see 'cistern query --help')")
			}
			if err := query.Check(args[0]); err != nil {
				return err
			}
			if serve != "" {
				// The exporter with this one query.
				return runExporter(cmd, exporter.Config{Listen: serve, Window: window, MaxSeries: maxSer,
					Queries: []exporter.Query{{Name: name, SQL: args[0]}}})
			}
			out := cmd.OutOrStdout()
			if outPath != "" {
				f, err := cli.CreatePrivate(outPath)
				if err != nil {
					return cli.Usagef("--out %s: %v", outPath, err)
				}
				defer f.Close()
				out = f
			}
			plot.ChartMode = cli.PrivateMode // --plot: the events' data, like --out
			opt := query.Options{Duration: duration, Mode: mode, Out: out, Format: format, Metrics: maddr, Plot: plotPath,
				OnMetrics: func(a string) { fmt.Fprintf(cmd.ErrOrStderr(), "metrics on http://%s/metrics\n", a) }}
			if explain {
				opt.Explain = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if ctx == nil {
				ctx = context.Background()
			}
			res, err := query.Run(ctx, args[0], opt)
			if errors.Is(err, query.ErrNotRoot) {
				return cli.RequireRoot("cistern query")
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "plan %s: %d events, %d rows, %d lost, %d late (counted in the next window), %d skipped by the kernel\n", res.Plan, res.Events, res.Rows, res.LostEvents, res.LateEvents, res.SkippedEvents)
			return nil
		},
	}
	c.Flags().DurationVar(&duration, "duration", 0, "stop after this long (default: until Ctrl-C)")
	c.Flags().StringVar(&format, "format", "table", "output format: table, json or csv")
	c.Flags().StringVar(&outPath, "out", "", "write rows to this file (created mode 0600) instead of stdout")
	c.Flags().BoolVar(&explain, "explain", false, "print the chosen plan, the alternatives, their costs and verifier outcomes (stderr)")
	c.Flags().BoolVar(&schema, "schema", false, "print the tables and columns")
	c.Flags().StringVar(&plotPath, "plot", "", "draw the first numeric aggregate per group to this PNG (mode 0600)")
	c.Flags().StringVar(&maddr, "metrics", "", "serve the kernel counters for Prometheus at HOST:PORT")
	c.Flags().StringVar(&serve, "serve", "", "run until stopped, serving the rows of each window as Prometheus series at HOST:PORT (see 'cistern exporter')")
	c.Flags().StringVar(&name, "name", "q", "with --serve: the query's name in metric names")
	c.Flags().DurationVar(&window, "window", exporter.DefaultWindow, "with --serve: the window if the query has no WINDOW")
	c.Flags().IntVar(&maxSer, "max-series", exporter.DefaultMaxSeries, "with --serve: label sets kept; rows past it are dropped and counted")
	c.Flags().StringVar(&mode, "mode", "optimizer", "optimizer, or mvsf_only (everything after the read in user space)")
	return c
}
