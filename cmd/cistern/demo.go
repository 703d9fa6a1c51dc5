package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/doctor"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

// demoSegment is one system's part of `cistern demo`.
type demoSegment struct {
	name, what string
	run        func(cmd *cobra.Command) error // nil until the system has landed
}

func demoSegments() []demoSegment {
	return []demoSegment{
		{"Kerby-KV", "memcached GETs answered at XDP from a kernel block pool: kernel hit ratio and memory efficiency, live", nil},
		{"capture", "TLS PostgreSQL queries captured through the accumulating channel, with loss counters", nil},
		{"eviction policies", "a cache trace replayed through in-kernel policies, hit ratio per policy", nil},
		{"page cache", "a file search in a tight memory cgroup, kernel LRU against an MRU agent", nil},
		{"CBUF", "a two-process ping-pong over zero-copy buffers beside a pipe", nil},
		{"query", "top syscalls by count, compiled from SQL to eBPF, with --explain", nil},
	}
}

func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run the doctor, then a few seconds of every system with real numbers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.RequireRoot("cistern demo"); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			banner(out, "doctor")
			rep := doctor.Run(cmd.Context(), doctor.Options{})
			rep.WriteTable(out)
			if !rep.CoreOK() {
				return fmt.Errorf("core checks failed: fix them (see above) and run the demo again")
			}
			for _, s := range demoSegments() {
				banner(out, s.name)
				fmt.Fprintf(out, "shows: %s\n", s.what)
				if s.run == nil {
					fmt.Fprintln(out, "status: not built yet")
					continue
				}
				if err := s.run(cmd); err != nil {
					return fmt.Errorf("demo %s: %w", s.name, err)
				}
			}
			return nil
		},
	}
}

func banner(w io.Writer, title string) {
	fmt.Fprintf(w, "\n=== %s ===\n", title)
}
