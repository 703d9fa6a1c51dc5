package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/evict/replay"
	"github.com/cistern-ebpf/cistern/internal/cli"
)

func newCacheReplayCmd() *cobra.Command {
	var (
		tracePath, format, policy, unit, jsonPath string
		size                                      uint64
	)
	c := &cobra.Command{
		Use:   "replay --trace FILE --format FORMAT --policy NAME --size N",
		Short: "Replay a cache trace through in-kernel eviction policies",
		Long: `replay runs a trace through an eviction policy in the kernel: the very
BPF policy object, its programs run with BPF_PROG_TEST_RUN over
batches of 4096 requests looped over in the kernel. Block traces
(cloudphysics, arc) become one request per 512-byte block. Traces may be
zstd-compressed. Formats: ` + strings.Join(replay.Formats, ", ") + ` (csv: key,size).
--unit bytes makes --size a budget of bytes (object sizes from the trace;
an object larger than the budget is never admitted).
Policies: ` + strings.Join(evict.Names(evict.Replay), ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tracePath == "" || format == "" || policy == "" || size == 0 {
				return cli.Usagef("--trace, --format, --policy and --size are required")
			}
			if !replay.ValidFormat(format) {
				return cli.Usagef("--format %q: want one of %s", format, strings.Join(replay.Formats, ", "))
			}
			if _, err := evict.Lookup(policy, evict.Replay); err != nil {
				return cli.Usagef("--%v", err)
			}
			if unit != "objects" && unit != "bytes" {
				return cli.Usagef("--unit %q: want objects or bytes", unit)
			}
			if err := cli.RequireRoot("cistern cache replay"); err != nil {
				return err
			}
			if err := rlimit.RemoveMemlock(); err != nil {
				return fmt.Errorf("remove memlock limit: %w", err)
			}
			reqs, err := replay.ReadFile(tracePath, format)
			if err != nil {
				if os.IsNotExist(err) {
					return cli.Usagef("--trace: %v", err)
				}
				return cli.Usagef("read trace: %v", err)
			}
			res, err := replay.Run(reqs, replay.Options{Policy: policy, Size: size, Unit: unit, Trace: filepath.Base(tracePath)})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s size %d %s: %d requests, hit ratio %.4f, byte hit ratio %.4f, %.0f requests/s, %d fallbacks\n",
				res.Policy, res.Trace, res.CacheSize, res.Unit, res.Requests, res.HitRatio, res.ByteHitRatio, res.RequestsPerSec, res.Fallbacks)
			if jsonPath != "" {
				return cli.WriteJSON(jsonPath, res)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&tracePath, "trace", "", "trace FILE (plain or zstd-compressed)")
	f.StringVar(&format, "format", "", "trace format: "+strings.Join(replay.Formats, "|"))
	f.StringVar(&policy, "policy", "", "eviction policy: "+strings.Join(evict.Names(evict.Replay), "|"))
	f.Uint64Var(&size, "size", 0, "cache size in --unit")
	f.StringVar(&unit, "unit", "objects", "unit of --size: objects (each counts 1) or bytes (request sizes)")
	f.StringVar(&jsonPath, "json", "", "write the result as JSON to FILE (- for stdout)")
	return c
}
