package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	pagecachebench "github.com/cistern-ebpf/cistern/bench/pagecache"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

// demoPagecache runs the scaled-down file search of `cistern bench
// pagecache --quick`: ripgrep over drivers/net of the Linux source, 4
// times in a cgroup limited to 70% of it, kernel LRU then the MRU agent.
func demoPagecache(cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	if _, err := os.Stat("/usr/src/linux-source-6.1.tar.xz"); err != nil {
		fmt.Fprintln(out, "status: skipped: the Debian package linux-source-6.1 is not installed (make deps)")
		return nil
	}
	rep, err := pagecachebench.Run(cmd.Context(), pagecachebench.Options{
		Quick: true, Parts: []string{"search"},
		Progress: func(s string) { benchkit.Step("%s", s) },
	})
	if err != nil {
		return err
	}
	rep.WriteTable(out)
	return nil
}
