package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/internal/cli"
)

// isCobraUsage recognises the untyped usage errors cobra returns.
func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires at most", "unknown flag", "invalid argument"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// group makes a command that only holds subcommands; run bare, it prints help
// and, given an unknown subcommand, fails with a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown command %q for %q (see '%s --help')", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	c.AddCommand(subs...)
	return c
}

func newCaptureCmd() *cobra.Command {
	return newCaptureRunCmd()
}

func newCacheCmd() *cobra.Command {
	return group("cache", "Eviction policies: trace replay and the page-cache agent",
		newCacheReplayCmd(),
		newCacheAgentCmd(),
		newCacheTraceCmd(),
		newCacheHeadroomCmd())
}

func newCBufCmd() *cobra.Command {
	return group("cbuf", "Zero-copy shared buffers between processes",
		newCBufManagerCmd(),
		newCBufStatsCmd())
}

func newQueryCmd() *cobra.Command {
	return newQueryRunCmd()
}
