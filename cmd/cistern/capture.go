package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/accum"
	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/internal/metrics"
)

func newCaptureRunCmd() *cobra.Command {
	var (
		pid       int
		children  bool
		cgroup    string
		all       bool
		protocol  string
		transport string
		format    string
		duration  time.Duration
		flush     uint32
		latency   time.Duration
		outPath   string
		metricsAt string
	)
	c := &cobra.Command{
		Use:   "capture (--pid P | --cgroup PATH | --all) [--transport auto|tls|plain] [--protocol postgres|mysql|raw] [--format table|json] [--out FILE] [--metrics ADDR] [--duration D]",
		Short: "Capture TLS and plaintext database traffic through an accumulating channel",
		Long: `capture attaches uprobes to the libssl.so.3 that process P has mapped
(SSL_write, SSL_read and their _ex forms, SSL_free) with --transport tls, or
tracepoints on the write/read/sendto/recvfrom/sendmsg/recvmsg syscalls P makes
on TCP/UDP sockets (and close) with --transport plain; auto (the default)
picks tls when P maps libssl.so.3, else plain, so a libssl-linked client
talking plaintext (psql sslmode=disable) needs --transport plain. It batches
the bytes per connection in the kernel (the accumulating channel), and prints one record per
query (PostgreSQL: simple and extended protocol; MySQL/MariaDB: COM_QUERY,
COM_STMT_PREPARE/EXECUTE; raw: one record per request/response
exchange, the request's first 256 bytes as the query and the answer's size
in bytes as rows): time, pid, query text, latency, rows, error, and
user and database when the connection's start was seen. Latency comes
from per-turn times inside each batch (microseconds): latency_exact is
false when the query was written in pieces or its answer's end is not a
turn's end (the value is then a bound).
On exit (--duration, Ctrl-C) it prints the channel's loss counters.

Selection: --pid P captures P and every process it has forked or forks
(a PostgreSQL postmaster's backends; --children=false: P alone, with the
uprobes' own per-process filter); --cgroup PATH the tasks of a cgroup-v2
directory and its descendants; --all every process. Except for
--children=false, the uprobes trap in every process using the library and a
check in BPF decides; the libraries are those the selected processes map
when the capture starts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, set := range []bool{pid != 0, cgroup != "", all} {
				if set {
					n++
				}
			}
			if n != 1 {
				return cli.Usagef("want exactly one of --pid, --cgroup or --all")
			}
			if pid < 0 {
				return cli.Usagef("--pid %d: want a process id", pid)
			}
			if protocol != "postgres" && protocol != "mysql" && protocol != "raw" {
				return cli.Usagef("--protocol %q: want postgres, mysql (MySQL and MariaDB) or raw", protocol)
			}
			switch transport {
			case capture.TransportAuto, capture.TransportTLS, capture.TransportPlain:
			default:
				return cli.Usagef("--transport %q: want auto, tls or plain", transport)
			}
			if format != "table" && format != "json" {
				return cli.Usagef("--format %q: want table or json", format)
			}
			cfg := accum.Config{FlushSize: flush, Latency: latency}
			if err := cfg.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			if err := cli.RequireRoot("cistern capture"); err != nil {
				return err
			}
			if pid != 0 {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
					return cli.Usagef("--pid %d: no such process", pid)
				}
			}
			opt := capture.Options{PID: pid, Children: pid != 0 && children, Cgroup: cgroup, All: all,
				Protocol: protocol, Transport: transport, Accum: cfg}
			if cgroup != "" {
				if _, err := capture.ResolveCgroup(cgroup); err != nil {
					return cli.Usagef("--cgroup: %v", err)
				}
			}
			out := cmd.OutOrStdout()
			if outPath != "" {
				f, err := os.Create(outPath)
				if err != nil {
					return cli.Usagef("--out: %v", err)
				}
				defer f.Close()
				out = f
			}
			cp, err := capture.Open(opt)
			if err != nil {
				return err
			}
			defer cp.Close()
			if metricsAt != "" {
				ctx, stop := context.WithCancel(cmd.Context())
				defer stop()
				addr, err := metrics.Serve(ctx, metricsAt, metrics.NewCounterSet("cistern", "capture", cp.Counters))
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "metrics at http://%s/metrics\n", addr)
			}
			via := cp.LibSSL
			if via == "" {
				via = "libssl.so.3 (none mapped yet: attached as processes map it)"
			}
			if cp.Transport == capture.TransportPlain {
				via = "socket syscalls (plaintext)"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "capturing %s of %s through %s\n", protocol, cp.Selection(), via)
			return runCapture(out, cmd.ErrOrStderr(), cp, format, duration)
		},
	}
	f := c.Flags()
	f.IntVar(&pid, "pid", 0, "process to capture (and, with --children, the processes it forks)")
	f.BoolVar(&children, "children", true, "with --pid: also capture the processes it has forked or forks")
	f.StringVar(&cgroup, "cgroup", "", "cgroup-v2 directory whose tasks (and descendants') are captured")
	f.BoolVar(&all, "all", false, "capture every process")
	f.StringVar(&transport, "transport", capture.TransportAuto, "auto (tls if the process maps libssl.so.3, else plain), tls or plain")
	f.StringVar(&protocol, "protocol", "postgres", "wire protocol to parse: postgres, mysql (MySQL and MariaDB), or raw (request/response exchanges, unparsed)")
	f.StringVar(&format, "format", "table", "output: table or json (one object per line)")
	f.StringVar(&outPath, "out", "", "write the records to FILE instead of standard output")
	f.StringVar(&metricsAt, "metrics", "", "serve Prometheus counters (channel and agent) at HOST:PORT/metrics")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until Ctrl-C or the process exits)")
	f.Uint32Var(&flush, "flush-size", accum.DefaultFlushSize, "accumulating channel flush size (power of two, 64..16384)")
	f.DurationVar(&latency, "latency", accum.DefaultLatency, "longest a byte waits in the kernel batch")
	return c
}

func runCapture(out, errOut io.Writer, cp *capture.Capture, format string, duration time.Duration) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	var end <-chan time.Time
	if duration > 0 {
		t := time.NewTimer(duration)
		defer t.Stop()
		end = t.C
	}
	var tw *tabwriter.Writer
	if format == "table" {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tPID\tLATENCY_US\tROWS\tQUERY\tERROR")
		tw.Flush()
	}
	enc := json.NewEncoder(out)
	n := 0
	gone := false
loop:
	for {
		select {
		case <-sig:
			break loop
		case <-end:
			break loop
		default:
		}
		qs, err := cp.Next(200 * time.Millisecond)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if cp.Opt.PID == 0 {
				continue
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", cp.Opt.PID)); err != nil {
				if gone { // one more idle round after the exit: drained
					break loop
				}
				gone = true
			}
			continue
		}
		if err != nil {
			return err
		}
		for _, q := range qs {
			n++
			if tw == nil {
				if err := enc.Encode(q); err != nil {
					return err
				}
				continue
			}
			lat := fmt.Sprintf("%.0f", q.LatencyUS)
			if !q.LatencyExact {
				lat = "<=" + lat
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", q.Time.Format("15:04:05.000000"), q.PID, lat, q.Rows,
				oneLine(q.Query), q.Error)
			tw.Flush()
		}
	}
	st, err := cp.Stats()
	if err != nil {
		return err
	}
	fmt.Fprintf(errOut, "%d queries; channel: %d records, %d payload bytes, %.3f ring bytes/payload byte; "+
		"lost: %d records, %d bytes (busy %d, table full %d, faults %d), %d sequence gaps; %d unparseable protocol bytes skipped\n",
		n, st.Records, st.PayloadBytes, st.RingPerPayload(), st.LostRecords, st.LostBytes,
		st.BusyDrops, st.NoConn, st.Faults, len(cp.Gaps()), cp.BadBytes())
	return nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
