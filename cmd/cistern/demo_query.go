package main

import (
	"fmt"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/query"
)

// demoQuery counts the machine's syscalls by name for a few seconds while
// dd makes a known number of reads and writes, with the optimizer's
// --explain, then the same query MVSF-only for comparison.
func demoQuery(cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	sql := "SELECT syscall, COUNT(*) AS calls, MAX(latency_ns) AS worst FROM syscalls GROUP BY syscall ORDER BY calls DESC LIMIT 8"
	fmt.Fprintf(out, "$ cistern query %q --duration 3s --explain\n", sql)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // some known load: dd copying one byte at a time
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=20000", "status=none").Run()
		}
	}()
	for _, mode := range []string{query.ModeOptimizer, query.ModeMVSFOnly} {
		opt := query.Options{Duration: 3 * time.Second, Out: out, Mode: mode}
		if mode == query.ModeOptimizer {
			opt.Explain = out
		} else {
			fmt.Fprintf(out, "\nthe same query with --mode mvsf_only (every event through the ring buffer):\n")
			opt.Duration = 2 * time.Second
		}
		res, err := query.Run(cmd.Context(), sql, opt)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "result: plan %s, %d syscalls seen, %d lost\n", res.Plan, res.Events, res.LostEvents)
	}
	return nil
}
