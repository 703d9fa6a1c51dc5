package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/query/exporter"
)

func newExporterCmd() *cobra.Command {
	var (
		cfgPath, listen string
		queries         []string
		window          time.Duration
		maxSeries       int
	)
	c := &cobra.Command{
		Use:   "exporter [--config FILE] [--query NAME='SQL' ...] [--listen ADDR] [--window D] [--max-series N]",
		Short: "query results as Prometheus metrics",
		Long: `exporter runs named queries continuously and serves every GROUP BY row of
each query's last window as a Prometheus series at http://ADDR/metrics:
group keys become labels, COUNT and SUM counters (added up over windows),
HIST a histogram, QUANTILE a gauge with a quantile label, the rest gauges.
A query without WINDOW closes one every --window. Past --max-series label
sets per query, rows are dropped and counted
(cistern_exporter_series_dropped_total). docs/query.md has the mapping.

The config file (YAML):
  listen: 127.0.0.1:9435
  window: 10s
  max_series: 1000
  queries:
    - name: syscalls
      sql: SELECT comm, syscall, COUNT(*) AS calls FROM syscalls GROUP BY comm, syscall
      cumulative: true    # COUNT/SUM/HIST add up over windows (default)`,
		Example: `  cistern exporter --query calls="SELECT comm, COUNT(*) AS calls FROM syscalls GROUP BY comm" --window 5s
  cistern exporter --config /etc/cistern/exporter.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := &exporter.Config{}
			if cfgPath != "" {
				var err error
				if cfg, err = exporter.Load(cfgPath); err != nil {
					return err
				}
			}
			for _, q := range queries {
				name, sql, ok := strings.Cut(q, "=")
				if !ok {
					return cli.Usagef("--query %q: want NAME='SQL'", q)
				}
				cfg.Queries = append(cfg.Queries, exporter.Query{Name: name, SQL: sql})
			}
			if cmd.Flags().Changed("listen") || cfg.Listen == "" {
				cfg.Listen = listen
			}
			if cmd.Flags().Changed("window") || cfg.Window == 0 {
				cfg.Window = window
			}
			if cmd.Flags().Changed("max-series") || cfg.MaxSeries == 0 {
				cfg.MaxSeries = maxSeries
			}
			return runExporter(cmd, *cfg)
		},
	}
	c.Flags().StringVar(&cfgPath, "config", "", "YAML file of named queries")
	c.Flags().StringArrayVar(&queries, "query", nil, "a named query, NAME='SQL' (repeatable)")
	c.Flags().StringVar(&listen, "listen", exporter.DefaultListen, "serve /metrics at HOST:PORT")
	c.Flags().DurationVar(&window, "window", exporter.DefaultWindow, "window of queries without WINDOW")
	c.Flags().IntVar(&maxSeries, "max-series", exporter.DefaultMaxSeries, "label sets kept per query; rows past it are dropped and counted")
	return c
}

// runExporter runs cfg until Ctrl-C or SIGTERM.
func runExporter(cmd *cobra.Command, cfg exporter.Config) error {
	if err := cli.RequireRoot("cistern exporter"); err != nil {
		return err
	}
	e, err := exporter.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = e.Run(ctx, func(a string) {
		fmt.Fprintf(cmd.ErrOrStderr(), "exporter: %d queries, metrics on http://%s/metrics\n", len(cfg.Queries), a)
	})
	for q, n := range e.Lost() {
		fmt.Fprintf(cmd.ErrOrStderr(), "exporter: query %s lost %d events in the kernel\n", q, n)
	}
	return err
}
