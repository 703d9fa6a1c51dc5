package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/doctor"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check, by trying them, the kernel features and tools Cistern needs",
		Long: `doctor loads and attaches a tiny program of every kind Cistern uses, inside a
throwaway network namespace where needed, and checks the external tools.
Each check is ok, missing (with the command that installs it) or unsupported
(with what it costs and what Cistern does instead); each capability is
loaded on its own, so one the kernel refuses hides no other. The systems
section says, per system, ok, degraded (and how) or unavailable (and what it
needs). It mounts tracefs and bpffs when missing.
Exit status 0 when every core check (marked *) is ok and no system is
unavailable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.RequireRoot("cistern doctor"); err != nil {
				return err
			}
			opt := doctor.Options{}
			if !asJSON {
				opt.Progress = func(s string) { fmt.Fprintf(os.Stderr, "checking %s…\n", s) }
			}
			rep := doctor.Run(cmd.Context(), opt)
			if asJSON {
				if err := cli.WriteJSON("-", rep); err != nil {
					return err
				}
			} else {
				rep.WriteTable(cmd.OutOrStdout())
			}
			if !rep.CoreOK() {
				return errors.New("core checks failed: see the fixes above")
			}
			if u := rep.Unavailable(); len(u) > 0 {
				return fmt.Errorf("unavailable on this kernel: %s (see the systems above)", strings.Join(u, ", "))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}
