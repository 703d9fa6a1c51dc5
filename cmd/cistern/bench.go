package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

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
	started  time.Time // the run's start: a plot older than it was not drawn by it
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
	b.started = start
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
		// A bench draws only the parts it has a figure for (pagecache's
		// zipf part alone once had none, and this said it wrote the
		// file): say so rather than name a file that was not written.
		if st, err := os.Stat(b.plotPath); err == nil && !st.ModTime().Before(b.started) {
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", b.plotPath)
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "no plot written to %s: the parts run have no figure to draw\n", b.plotPath)
		}
	}
	if b.jsonPath != "" {
		if err := cli.WriteJSON(b.jsonPath, rep); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", b.jsonPath)
	}
	return nil
}
