package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
)

func newBenchCompareCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compare RUN.json RUN.json [RUN.json ...]",
		Short: "Compare runs of one bench: every target's median [min-max] and verdict per run",
		Long: `Reads the JSON of two or more runs of one bench (--json) and prints, for
every target, each run's median [min-max] and PASS or FAIL, and whether
the verdicts agree. Exits 1 when a verdict differs between the runs: a
figure that flips from run to run says nothing.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var runs []benchkit.RunTargets
			for _, p := range args {
				r, err := benchkit.ReadTargets(p)
				if err != nil {
					return err
				}
				runs = append(runs, r)
			}
			differ, err := benchkit.Compare(cmd.OutOrStdout(), runs)
			if err != nil {
				return err
			}
			if len(differ) > 0 {
				return fmt.Errorf("verdicts differ between the runs: %s", strings.Join(differ, ", "))
			}
			return nil
		},
	}
}
