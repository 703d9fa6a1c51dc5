// Command cistern keeps and moves data inside the Linux kernel with eBPF:
// Kerby-KV, traffic capture, eviction policies, CBUF and SQL over kernel events.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "cistern",
		Short: "Keep and move data inside the Linux kernel with eBPF",
		Long: `Cistern keeps and moves application data inside the Linux kernel with eBPF:
  kv       Kerby-KV: memcached answered at XDP from a pool of kernel blocks
  capture  TLS and plaintext database traffic, batched before the ring buffer
  cache    eviction policies for in-kernel caches and the page cache
  cbuf     zero-copy shared buffers between processes
  query    SQL over kernel events, compiled to eBPF that always loads
  exporter query results as Prometheus metrics
Start with 'cistern doctor' to see what this kernel supports.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cli.UsageError{Err: fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())}
	})
	root.AddCommand(
		newVersionCmd(),
		newDoctorCmd(),
		newDemoCmd(),
		newKVCmd(),
		newCaptureCmd(),
		newCacheCmd(),
		newCBufCmd(),
		newQueryCmd(),
		newExporterCmd(),
		newBenchCmd(),
	)
	return root
}

func main() {
	root := newRoot()
	cmd, err := root.ExecuteC()
	if err != nil {
		// Unknown commands and argument-count errors come from cobra untyped.
		if exitCode(err) != cli.ExitUsage && cmd != nil && isCobraUsage(err) {
			err = cli.UsageError{Err: err}
		}
		fmt.Fprintf(os.Stderr, "cistern: %v\n", err)
		os.Exit(exitCode(err))
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "cistern %s\n", version)
		},
	}
}
