package main

import (
	"fmt"

	"github.com/spf13/cobra"

	cbufbench "github.com/cistern-ebpf/cistern/bench/cbuf"
)

// demoCBuf ping-pongs 64 KiB messages between two processes through CBUF
// (the id travels, the pages do not) and through a pipe (the bytes are
// copied both ways), and prints the ratio.
func demoCBuf(cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	const pages = 16
	fmt.Fprintf(out, "two processes exchange %d KiB messages 2000 times; a CBUF manager runs in this process\n", pages*4)
	rtt, err := cbufbench.PingPong(cmd.Context(), pages, 2000)
	if err != nil {
		return err
	}
	for _, m := range []string{"cbuf_block", "cbuf_poll", "pipe"} {
		fmt.Fprintf(out, "  %-10s round trip %8.2f us\n", m, rtt[m])
	}
	fmt.Fprintf(out, "result: pipe / cbuf_block = x%.1f, pipe / cbuf_poll = x%.1f (zero-copy: only the 8-byte id crosses)\n",
		rtt["pipe"]/max(rtt["cbuf_block"], 1e-9), rtt["pipe"]/max(rtt["cbuf_poll"], 1e-9))
	return nil
}
