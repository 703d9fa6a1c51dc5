package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"

	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/internal/metrics"
	"github.com/cistern-ebpf/cistern/internal/mounts"
	"github.com/cistern-ebpf/cistern/kv"
)

const kvPinRoot = "/sys/fs/bpf/cistern/kv"

func newKVCmd() *cobra.Command {
	return group("kv", "Kerby-KV: memcached answered at XDP from a kernel block pool",
		newKVServeCmd(), newKVStatsCmd())
}

func newKVServeCmd() *cobra.Command {
	var (
		cfg       kv.Config
		iface     string
		mcAddr    string
		metricsAt string
		xdpMode   string
		generic   bool
		tcpGets   bool
		noTCP     bool
	)
	c := &cobra.Command{
		Use:   "serve --iface IF --memcached HOST:PORT",
		Short: "Serve memcached UDP GETs at XDP from a Kerby pool",
		Long: `serve attaches Kerby-KV to the interface memcached's clients reach it on.
UDP get hits are answered in the kernel (XDP_TX); misses, TCP and oversize
values go to memcached, which stays the source of truth. UDP sets write
through; TCP writes invalidate the kernel copy before memcached sees them.
--tcp also answers GET hits on memcached's TCP connections in the kernel
(sockmap). It is on by default only where the kernel passes the doctor's
sockmap_self_redirect self-test (6.12, 6.18 and 7.2 do not: their
sockmap can leave an answered segment counted as unread, and memcached
spin); elsewhere --tcp turns it on, and serve prints which and why
(docs/kerby-kv.md, "TCP on each kernel").
--policy NAME makes pool-full eviction follow an in-kernel eviction policy
(cistern cache replay's): the data path queues hits and fills, a drainer
applies them every millisecond and evicts ahead of need, keeping 1/16 of
the pool free.
--xdp-mode auto (the default) attaches generic XDP on a veth, where native
XDP_TX replies reach the peer only if the peer runs an XDP program of its
own, and native XDP elsewhere (generic if the driver has none); native on a
veth whose peer runs no XDP program is refused.
Counters: 'cistern kv stats --json', Prometheus at --metrics, and on exit;
driver_xdp_tx_errors and driver_tx_dropped are replies the interface
dropped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.RequireRoot("cistern kv serve"); err != nil {
				return err
			}
			if iface == "" || mcAddr == "" {
				return cli.Usagef("--iface and --memcached are required")
			}
			host, portStr, err := net.SplitHostPort(mcAddr)
			port, perr := strconv.ParseUint(portStr, 10, 16)
			if err != nil || perr != nil || port == 0 {
				return cli.Usagef("--memcached %q: want HOST:PORT", mcAddr)
			}
			cfg.Port = uint16(port)
			if err := cfg.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			mode, err := kv.ParseXDPMode(xdpMode)
			if err != nil {
				return cli.UsageError{Err: err}
			}
			if generic {
				if cmd.Flags().Changed("xdp-mode") && mode != kv.XDPGeneric {
					return cli.Usagef("--generic and --xdp-mode %s contradict each other: give only --xdp-mode", mode)
				}
				mode = kv.XDPGeneric
			}
			l, err := netlink.LinkByName(iface)
			if err != nil {
				return cli.Usagef("--iface %s: no such interface", iface)
			}
			warn := func(msg string) { fmt.Fprintf(cmd.ErrOrStderr(), "cistern: warning: %s\n", msg) }
			if mode == kv.XDPNative {
				if err := kv.CheckNativePeer(l.Attrs().Index, iface, warn); err != nil {
					return err
				}
			}
			if err := kv.CheckMemcached(host, portStr); err != nil {
				return err
			}
			tcpOn, tcpWhy := kv.TCPDefault()
			switch {
			case noTCP:
				tcpOn, tcpWhy = false, "off: --no-tcp"
			case cmd.Flags().Changed("tcp"):
				tcpOn, tcpWhy = tcpGets, map[bool]string{true: "on: --tcp", false: "off: --tcp=false"}[tcpGets]
			}
			cfg.TCP = tcpOn
			fmt.Fprintf(cmd.ErrOrStderr(), "TCP GETs in the kernel: %s\n", tcpWhy)
			fmt.Fprintf(cmd.ErrOrStderr(), "loading Kerby-KV: pool of %d blocks…\n", cfg.PoolConfig().CapacityBlocks)
			srv, err := kv.Load(cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			if err := srv.Attach(l.Attrs().Index, mode); err != nil {
				return err
			}
			if mountedNow, err := mounts.Ensure(mounts.BPFFS); err != nil {
				return err
			} else if mountedNow {
				fmt.Fprintln(cmd.ErrOrStderr(), "bpffs was not mounted: mounted it at /sys/fs/bpf")
			}
			srv.StartDrainer(kv.DefaultDrainInterval, func(err error) {
				fmt.Fprintf(cmd.ErrOrStderr(), "cistern: policy drainer: %v\n", err)
			})
			pin := filepath.Join(kvPinRoot, iface)
			if err := srv.Pin(pin); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if metricsAt != "" {
				addr, err := metrics.Serve(ctx, metricsAt,
					metrics.NewCounterSet("cistern", "kv", srv.CountersAndDriver),
					metrics.NewCounterSet("cistern", "kv_pool", srv.PoolCounters),
					metrics.NewCounterSet("cistern", "kv_policy", srv.PolicyCounters))
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "metrics at http://%s/metrics\n", addr)
			}
			pc := cfg.PoolConfig()
			policy := cfg.Policy
			if policy == "" {
				policy = "fifo ring"
			}
			if srv.StaleTC > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "removed %d cls_bpf filter(s) of Kerby-KV left on %s by a kv serve that did not exit cleanly\n", srv.StaleTC, iface)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Kerby-KV (%s mode, eviction %s) on %s with %s XDP (%s); tc: %s; tcp: %s; memcached %s; pool %d blocks of %d B (max %d per value); maps pinned at %s\n",
				cfg.Mode, policy, iface, srv.XDPMode, srv.XDPReason, srv.TCMode, srv.TCPMode, mcAddr, pc.CapacityBlocks, pc.BlockSize, pc.MaxBlocks, pin)
			go srv.WatchDriver(ctx, warn)
			fmt.Fprintln(cmd.OutOrStdout(), "serving; Ctrl-C to stop")
			<-ctx.Done()
			st, err := srv.Stats()
			if err == nil {
				printKVCounters(cmd, st)
			}
			if pcs, err := srv.PolicyCounters(); err == nil && pcs != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "policy %s: %d events applied, %d inserts, %d evictions (%d by the fallback)\n",
					cfg.Policy, pcs["events"], pcs["inserts"], pcs["evictions"], pcs["fallback_evictions"])
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&iface, "iface", "", "interface memcached's clients reach it on")
	f.StringVar(&mcAddr, "memcached", "", "memcached address HOST:PORT (UDP must be enabled: memcached -U PORT)")
	f.StringVar(&cfg.Mode, "mode", kv.ModeKerby, "kerby (chained blocks) or fixed (one slot per key, the static baseline)")
	f.Uint32Var(&cfg.BlockSize, "block-size", 128, "kerby block size in bytes (multiple of 8)")
	f.Uint32Var(&cfg.MaxBlocks, "max-blocks", 8, "kerby blocks per value")
	f.Uint32Var(&cfg.SlotSize, "slot-size", 128, "fixed mode: slot size in bytes")
	f.Uint32Var(&cfg.PoolMB, "pool-mb", 256, "payload capacity of the pool in MiB")
	f.Uint32Var(&cfg.MaxObjects, "max-objects", 0, "allocation-map entries (default: one per block, at most 4M)")
	f.DurationVar(&cfg.WriteWindow, "write-window", time.Millisecond, "writes to one key closer than this invalidate instead of update")
	f.DurationVar(&cfg.FillQuarantine, "fill-quarantine", 50*time.Millisecond, "do not fill from GET replies this soon after a write to the key")
	f.DurationVar(&cfg.FillTTL, "fill-ttl", 0, "expire values filled from GET replies after this long (0: never)")
	f.StringVar(&cfg.Policy, "policy", "", "eviction policy when the pool is full: "+strings.Join(kv.Policies(), "|")+" (default: the built-in FIFO ring)")
	f.StringVar(&metricsAt, "metrics", "", "serve Prometheus metrics at ADDR (e.g. 127.0.0.1:9101)")
	// TCP GETs in the kernel are opt-in: with them memcached can be left
	// spinning on a connection the sockmap path answered (docs/kerby-kv.md,
	// "TCP bench: where the time goes"); TCP writes always invalidate.
	f.BoolVar(&tcpGets, "tcp", false, "answer GET hits on memcached's TCP connections in the kernel (default: on only where the kernel passes the sockmap_self_redirect self-test; see docs/kerby-kv.md)")
	f.BoolVar(&noTCP, "no-tcp", false, "leave GETs on memcached's TCP connections to memcached")
	f.MarkDeprecated("no-tcp", "use --tcp=false")
	f.StringVar(&xdpMode, "xdp-mode", string(kv.XDPAuto), "auto (generic on a veth, else native when the driver has it), native or generic")
	f.BoolVar(&generic, "generic", false, "same as --xdp-mode generic")
	f.MarkDeprecated("generic", "use --xdp-mode generic")
	return c
}

func newKVStatsCmd() *cobra.Command {
	var asJSON bool
	var iface string
	c := &cobra.Command{
		Use:   "stats [--iface IF] [--json]",
		Short: "Read Kerby-KV's live counters and pool statistics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.RequireRoot("cistern kv stats"); err != nil {
				return err
			}
			if _, err := mounts.Ensure(mounts.BPFFS); err != nil {
				return err
			}
			dir := filepath.Join(kvPinRoot, iface)
			if iface == "" {
				ents, _ := os.ReadDir(kvPinRoot)
				if len(ents) != 1 {
					return cli.Usagef("%d Kerby-KV instances running: name one with --iface", len(ents))
				}
				dir = filepath.Join(kvPinRoot, ents[0].Name())
			}
			st, err := kv.PinnedStats(dir)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.WriteJSON("-", st)
			}
			printKVCounters(cmd, st)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().StringVar(&iface, "iface", "", "interface of the instance (default: the only one)")
	return c
}

func printKVCounters(cmd *cobra.Command, st kv.Stats) {
	w := cmd.OutOrStdout()
	names := make([]string, 0, len(st.Counters))
	for n := range st.Counters {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "Kerby-KV counters:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-18s %d\n", n, st.Counters[n])
	}
	p := st.Pool
	fmt.Fprintf(w, "kernel hit ratio %.3f; pool: %d objects, %d live blocks, %d payload bytes, memory efficiency %.3f, leaked blocks %d\n",
		st.KernelHitRatio, p.Objects, p.LiveBlocks, p.PayloadBytes, p.MemoryEfficiency, p.LeakedBlocks)
}
