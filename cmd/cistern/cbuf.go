package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/cbuf/kcomp"
	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/internal/metrics"
	"github.com/cistern-ebpf/cistern/internal/size"
)

const defaultCBufSocket = "/run/cistern-cbuf.sock"

func newCBufManagerCmd() *cobra.Command {
	var (
		opt               cbuf.ManagerOptions
		memory, pool, mAd string
		kernel            bool
		allowUIDs         []uint
		allowGroups       []string
	)
	c := &cobra.Command{
		Use:   "manager [--socket PATH] [--group G] [--allow-uid UID]... [--allow-group G]... [--memory SIZE] [--policy max-throughput|priority|qos] [--metrics ADDR]",
		Short: "Run the CBUF manager",
		Long: `manager owns the shared buffer pools. Components connect to --socket with
libcbuf (C) or the Go package cbuf, receive their metadata region and pool as
memfds (SCM_RIGHTS) and then allocate, free, send and receive buffers without
calling the manager; it is asked only to collect dead buffers and to map
another component's pool. A policy thread (4 Hz) sizes each pool:
max-throughput, priority (CBUF_PRIORITY of each component) or qos (CBUF_QOS,
a blocked-time target in percent).

Who may connect: the socket is mode 0600 (the manager's uid only); --group G
makes it 0660 for group G. --allow-uid/--allow-group admit only those uids
or groups (primary or supplementary), checked with SO_PEERCRED and
SO_PEERGROUPS at accept whatever the mode. Components of one uid share
whole pools; a component of another uid reads only buffers an exporting
owner granted to it (cbuf_export, cbuf_grant, cbuf_send_to). See the threat
model in docs/cbuf.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := size.Parse(memory)
			if err != nil {
				return cli.Usagef("--memory: %v", err)
			}
			opt.Memory = uint64(n)
			if pool != "" {
				if n, err = size.Parse(pool); err != nil {
					return cli.Usagef("--pool: %v", err)
				}
				opt.Pool = uint64(n)
			}
			switch opt.Policy {
			case "max-throughput", "priority", "qos":
			default:
				return cli.Usagef("--policy %q: want max-throughput, priority or qos", opt.Policy)
			}
			if opt.Memory < 256<<10 || opt.Memory > 64<<30 {
				return cli.Usagef("--memory %s: want between 256K and 64G", memory)
			}
			for _, u := range allowUIDs {
				opt.AllowUIDs = append(opt.AllowUIDs, uint32(u))
			}
			for _, g := range allowGroups {
				gid, err := cbuf.LookupGroup(g)
				if err != nil {
					return cli.Usagef("--allow-group: %v", err)
				}
				opt.AllowGIDs = append(opt.AllowGIDs, uint32(gid))
			}
			if opt.Group != "" {
				if _, err := cbuf.LookupGroup(opt.Group); err != nil {
					return cli.Usagef("--group: %v", err)
				}
			}
			if kernel {
				if err := cli.RequireRoot("cistern cbuf manager --kernel"); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			errw := cmd.ErrOrStderr()
			opt.Logf = func(f string, a ...any) { fmt.Fprintf(errw, f+"\n", a...) }
			var live atomic.Pointer[cbuf.Manager]
			if mAd != "" {
				// scrapes before the manager exists see nothing yet
				addr, err := metrics.Serve(ctx, mAd, metrics.NewCounterSet("cistern", "cbuf", func() (map[string]uint64, error) {
					m := live.Load()
					if m == nil {
						return nil, nil
					}
					return cbufCounters(m.Stats()), nil
				}))
				if err != nil {
					return err
				}
				fmt.Fprintf(errw, "metrics on http://%s/metrics\n", addr)
			}
			m, err := cbuf.NewManager(opt)
			if err != nil {
				return err
			}
			live.Store(m)
			if kernel {
				src, err := kcomp.Load()
				if err != nil {
					return err
				}
				defer src.Close()
				if err := m.AttachKernel(src); err != nil {
					return err
				}
				fmt.Fprintf(errw, "kernel component in slot %d: exec records in %d pages (cbuf_kernel_recv)\n", cbuf.KernelSlot, kcomp.Pages)
			}
			who := "its own uid only (0600)"
			if opt.Group != "" {
				who = "group " + opt.Group + " (0660)"
			}
			fmt.Fprintf(errw, "cbuf manager on %s for %s: %s of pool memory, policy %s\n", opt.Socket, who, memory, opt.Policy)
			err = m.Run(ctx)
			s := m.Stats()
			fmt.Fprintf(errw, "cbuf manager stopped: %d malformed requests dropped, %d orphan buffers; refused %d connections, %d maps, %d ids\n",
				s.Drops, s.Orphans, s.RefusedConn, s.RefusedMap, s.RefusedIDs)
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&opt.Socket, "socket", defaultCBufSocket, "Unix socket PATH components connect to")
	f.StringVar(&memory, "memory", "64M", "pool memory for all components together")
	f.StringVar(&pool, "pool", "", "first pool size of each component (default memory/8)")
	f.StringVar(&opt.Policy, "policy", "max-throughput", "pool policy: max-throughput|priority|qos")
	f.DurationVar(&opt.Interval, "interval", 0, "policy period (default 250ms: 4 Hz)")
	f.StringVar(&mAd, "metrics", "", "serve Prometheus metrics on ADDR (HOST:PORT)")
	f.StringVar(&opt.Group, "group", "", "admit group G (name or number): socket mode 0660 instead of 0600")
	f.UintSliceVar(&allowUIDs, "allow-uid", nil, "admit only these uids (and the manager's), checked at accept (repeatable)")
	f.StringSliceVar(&allowGroups, "allow-group", nil, "admit only members of these groups (and the listed uids), checked at accept (repeatable)")
	f.BoolVar(&kernel, "kernel", false, "add the kernel as a component: a BPF program sends exec records as cbufs (root)")
	return c
}

func cbufCounters(s cbuf.Stats) map[string]uint64 {
	out := map[string]uint64{"quota_pages": s.QuotaPages, "used_pages": s.UsedPages, "orphan_buffers": uint64(s.Orphans), "malformed_requests": s.Drops,
		"refused_connections": s.RefusedConn, "refused_map": s.RefusedMap, "refused_ids": s.RefusedIDs, "grants": uint64(s.Grants)}
	for _, c := range s.Components {
		p := fmt.Sprintf("c%d_", c.Slot)
		out[p+"pool_pages"] = c.PoolPages
		out[p+"used_pages"] = c.UsedPages
		out[p+"free_buffers"] = uint64(c.FreeBuffers)
		out[p+"cached_buffers"] = uint64(c.CachedBuffers) // in the C client's thread caches
		out[p+"collections"] = c.Collections
		out[p+"collected"] = c.Collected
		out[p+"blocked_us"] = uint64(c.BlockedMs * 1000)
		out[p+"allocs"] = c.Allocs
		out[p+"uid"] = uint64(c.UID)
		out[p+"gid"] = uint64(c.GID)
		out[p+"pid"] = uint64(c.Pid)
		out[p+"grants_out"] = uint64(c.GrantsOut)
		out[p+"grants_in"] = uint64(c.GrantsIn)
		out[p+"refused_map"] = c.RefusedMap
		out[p+"refused_ids"] = c.RefusedIDs
	}
	return out
}

func newCBufStatsCmd() *cobra.Command {
	var (
		socket string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "stats [--socket PATH] [--json]",
		Short: "Show CBUF pools, blocked time, collections and free buffers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := cbuf.QueryStats(socket)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				e := json.NewEncoder(out)
				e.SetIndent("", "  ")
				return e.Encode(s)
			}
			fmt.Fprintf(out, "policy %s; memory %d pages, quotas %d, in buffers %d; %d orphan buffers; %d malformed requests\n",
				s.Policy, s.MemoryPages, s.QuotaPages, s.UsedPages, s.Orphans, s.Drops)
			fmt.Fprintf(out, "refused: %d connections, %d maps, %d ids; %d grants across uids\n", s.RefusedConn, s.RefusedMap, s.RefusedIDs, s.Grants)
			if k := s.Kernel; k != nil {
				fmt.Fprintf(out, "kernel component: %d pages, %d out, %d handed, %d returned, %d execs dropped for want of a page\n",
					k.Pages, k.Out, k.Handed, k.Returned, k.Drops)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SLOT\tNAME\tPID\tUID\tGID\tPOOL\tUSED\tBUFS\tFREE\tCACHED\tBLOCKED_MS\tBLOCKED%\tCOLLECTIONS\tCOLLECTED\tALLOCS\tGRANTS_OUT/IN\tREFUSED_MAP/IDS")
			for _, c := range s.Components {
				name := c.Name
				if !c.Alive {
					name += " (gone)"
				}
				if c.Exporting {
					name += " (exports)"
				}
				fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%d\t%d\t%d\t%d/%d\t%d/%d\n", c.Slot, name, c.Pid, c.UID, c.GID,
					c.PoolPages, c.UsedPages, c.Buffers, c.FreeBuffers, c.CachedBuffers, c.BlockedMs, c.BlockedPct, c.Collections, c.Collected, c.Allocs,
					c.GrantsOut, c.GrantsIn, c.RefusedMap, c.RefusedIDs)
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&socket, "socket", defaultCBufSocket, "the manager's Unix socket")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
