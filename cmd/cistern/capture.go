package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/accum"
	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/capture/otlp"
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
		side      string
		ring      uint32
		format    string
		duration  time.Duration
		flush     uint32
		latency   time.Duration
		outPath   string
		metricsAt string
		otlpAt    string
		otlpProto string
		textMode  string
		otlpText  string
		holdNew   bool
		holdMax   time.Duration
		summary   bool
		sumMax    int
	)
	c := &cobra.Command{
		Use:   "capture (--pid P | --cgroup PATH | --all) [--transport both|tls|plain] [--side client|server|both] [--protocol postgres|mysql|raw] [--format table|json] [--query-text raw|sanitized] [--out FILE] [--metrics ADDR] [--otlp HOST:PORT] [--hold-new [--hold-max D]] [--summary] [--duration D]",
		Short: "Capture TLS and plaintext database traffic through an accumulating channel",
		Long: `capture prints one record per query sent over every connection of the
selected processes, TLS or not.

Transports (--transport both, the default; tls or plain filter):
  tls    uprobes on every libssl.so.3 the selected processes map (SSL_write,
         SSL_read, their _ex forms, SSL_free; SSL_connect, SSL_accept and
         SSL_do_handshake to recognise the socket) and on crypto/tls
         (*Conn).Write/Read/Close of every Go binary they run (found by the
         symbol table or .gopclntab; returns caught at the RET instructions).
  plain  tracepoints on the write/read/sendto/recvfrom/sendmsg/recvmsg
         syscalls on TCP/UDP sockets (and close).
A socket used by a TLS call, or whose first bytes are a TLS hello (STARTTLS,
as after PostgreSQL's SSLRequest), is TLS: its ciphertext is skipped and its
plaintext comes from the uprobes, so no query is captured twice.

Selection: --pid P captures P and every process it has forked or forks
(a PostgreSQL postmaster's backends; --children=false: P alone, with the
uprobes' own per-process filter); --cgroup PATH the tasks of a cgroup-v2
directory and its descendants; --all every process.

Attachment: the kernel announces each file a selected process executes and
each libssl.so* it opens that is not attached yet; the agent attaches at
once (offsets cached by build id: another copy is attached without reading
its symbols). Rescans of /proc stay as a safety net. --hold-new stops such a
process in the kernel (SIGSTOP) until its uprobes are attached, --hold-max
at most (then continued and counted as hold_timeouts); every held process is
continued when the agent exits, even killed (a watchdog process does it).
A held process's parent sees it stopped if it waits with WUNTRACED (an
interactive shell's job control does).

Unread connections: a TLS socket whose plaintext no probe read from its
first TLS byte (a TLS stack without uprobes, a process whose library was
attached too late) is counted (tls_connections_unread) and reported at its
end as a record with "unread": true, unread_reason no_tls_probe or
start_missed, its comm, pid, addresses and bytes_sent/bytes_received.

Protocols: postgres (simple and extended), mysql (MySQL/MariaDB: COM_QUERY,
COM_STMT_PREPARE/EXECUTE), raw (one record per request/response exchange:
the request's first 256 bytes as the query, the answer's bytes as rows).

Record (JSON keys; the table shows the same, in this order):
  ts             time the query was sent (RFC 3339)
  pid, tid       process, and the thread that completed the query
  comm           name of the thread that opened the connection
  side           client or server: which end of the connection this process
                 is (from the protocol: the client sends the queries)
  local, remote  the socket's addresses, ip:port or [ip6]:port (empty if
                 unknown); both ends of a local connection carry the same
                 pair, swapped, and can be joined on it
  transport      tls or plain
  library        openssl, go, or none (plain)
  conn           connection id (this capture's)
  protocol       postgres, mysql or raw
  query          the statement text (--query-text sanitized: its literals
                 as ?, comments removed; see below)
  fingerprint    16 hex digits, FNV-1a 64 of the sanitized text: equal for
                 statements that differ only in their literals
  latency_us     from the query's first byte sent to its answer's last byte
  latency_exact  false when the value is a bound (the query written in
                 pieces, or its answer's end not a turn's end)
  rows           rows returned or affected (raw: answer bytes)
  error          the server's error, empty if none (sanitized: its code,
                 as ERROR 23505, without the message, which may quote values)
  user, database when the connection's start was seen
  unread, unread_reason, bytes_sent, bytes_received
                 only in unread records (above)

Query text: the records hold every client's statements, passwords and
values included. --out files are created mode 0600 (an existing file of
ours is truncated and set to 0600; one of another user is refused).
--query-text sanitized replaces literals (strings, numbers, IN lists,
VALUES rows) by ? in the records; the default, raw, keeps the audit
stream's text as sent. Spans sent with --otlp are sanitized unless
--otlp-query-text raw. docs/capture.md has the rules.
On exit (--duration, Ctrl-C) it prints the channel's loss counters, and
with --summary, per side, database user, client command and statement
fingerprint: count, errors, rows, p50/p99 latency (the sanitized text).`,
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
			case capture.TransportBoth, capture.TransportTLS, capture.TransportPlain:
			default:
				return cli.Usagef("--transport %q: want both, tls or plain", transport)
			}
			switch side {
			case "both":
				side = ""
			case capture.SideClient, capture.SideServer:
			default:
				return cli.Usagef("--side %q: want client, server or both", side)
			}
			if format != "table" && format != "json" {
				return cli.Usagef("--format %q: want table or json", format)
			}
			if textMode != otlp.TextRaw && textMode != otlp.TextSanitized {
				return cli.Usagef("--query-text %q: want raw or sanitized", textMode)
			}
			if otlpText != otlp.TextRaw && otlpText != otlp.TextSanitized {
				return cli.Usagef("--otlp-query-text %q: want sanitized or raw", otlpText)
			}
			cfg := accum.Config{FlushSize: flush, Latency: latency, RingSize: ring}
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
				Protocol: protocol, Transport: transport, Side: side, Accum: cfg, HoldNew: holdNew, HoldMax: holdMax}
			if holdNew && transport == capture.TransportPlain {
				return cli.Usagef("--hold-new waits for TLS uprobes: not with --transport plain")
			}
			if sumMax <= 0 {
				return cli.Usagef("--summary-max-series %d: want a positive number", sumMax)
			}
			if holdMax <= 0 {
				return cli.Usagef("--hold-max %v: want a positive duration", holdMax)
			}
			if cgroup != "" {
				if _, err := capture.ResolveCgroup(cgroup); err != nil {
					return cli.Usagef("--cgroup: %v", err)
				}
			}
			out := cmd.OutOrStdout()
			if outPath != "" {
				f, err := cli.CreatePrivate(outPath)
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
			var spans *otlp.Exporter
			if otlpAt != "" {
				if spans, err = otlp.New(otlp.Options{Endpoint: otlpAt, Protocol: otlpProto, QueryText: otlpText}); err != nil {
					return err
				}
				defer func() {
					st := spans.Close(5 * time.Second)
					fmt.Fprintf(cmd.ErrOrStderr(), "otlp %s: %d spans exported, %d failed (collector refused or unreachable), %d dropped (queue full), %d unsent at exit\n",
						otlpAt, st.Exported, st.Failed, st.Dropped, st.Unsent)
				}()
			}
			counters := func() (map[string]uint64, error) {
				m, err := cp.Counters()
				if spans != nil && m != nil {
					for k, v := range spans.Counters() {
						m[k] = v
					}
				}
				return m, err
			}
			var sum *capture.Summary
			collectors := []prometheus.Collector{metrics.NewCounterSet("cistern", "capture", counters)}
			if summary {
				sum = capture.NewSummary(sumMax)
				collectors = append(collectors, sum)
			}
			if metricsAt != "" {
				ctx, stop := context.WithCancel(cmd.Context())
				defer stop()
				addr, err := metrics.Serve(ctx, metricsAt, collectors...)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "metrics at http://%s/metrics\n", addr)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "capturing %s of %s through %s\n", protocol, cp.Selection(), cp.Via())
			po := capture.PrintOptions{Format: format, Sanitize: textMode == otlp.TextSanitized, Summary: sum}
			if spans != nil {
				po.Send = spans.Send
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			return capture.Print(ctx, cp, out, cmd.ErrOrStderr(), po)
		},
	}
	f := c.Flags()
	f.IntVar(&pid, "pid", 0, "process to capture (and, with --children, the processes it forks)")
	f.BoolVar(&children, "children", true, "with --pid: also capture the processes it has forked or forks")
	f.StringVar(&cgroup, "cgroup", "", "cgroup-v2 directory whose tasks (and descendants') are captured")
	f.BoolVar(&all, "all", false, "capture every process")
	f.StringVar(&transport, "transport", capture.TransportBoth, "both (TLS and plaintext connections), tls or plain")
	f.StringVar(&side, "side", "both", "client, server or both: which ends of the connections to report")
	f.StringVar(&protocol, "protocol", "postgres", "wire protocol to parse: postgres, mysql (MySQL and MariaDB), or raw (request/response exchanges, unparsed)")
	f.StringVar(&format, "format", "table", "output: table or json (one object per line)")
	f.StringVar(&outPath, "out", "", "write the records to FILE (created mode 0600) instead of standard output")
	f.StringVar(&textMode, "query-text", otlp.TextRaw, "raw (the statements as sent) or sanitized (literals as ?, errors as their code) in the records printed or written")
	f.StringVar(&metricsAt, "metrics", "", "serve Prometheus counters (channel and agent) at HOST:PORT/metrics")
	f.StringVar(&otlpAt, "otlp", "", "send each query as an OpenTelemetry span to this collector (HOST:PORT or http(s)://HOST:PORT)")
	f.StringVar(&otlpProto, "otlp-protocol", "grpc", "OTLP over grpc (port 4317) or http (4318)")
	f.StringVar(&otlpText, "otlp-query-text", otlp.TextSanitized, "db.query.text of the spans: sanitized (literals as ?, errors as their code) or raw")
	f.BoolVar(&holdNew, "hold-new", false, "stop a selected process that executes a file (or opens a libssl) not attached yet until its uprobes are attached")
	f.DurationVar(&holdMax, "hold-max", capture.DefaultHoldMax, "with --hold-new: the longest a process is held (then continued, counted as hold_timeouts)")
	f.BoolVar(&summary, "summary", false, "at exit, print per side, database user, client command and statement fingerprint: count, errors, rows, p50/p99 latency (with --metrics: served as cistern_capture_summary_* series)")
	f.IntVar(&sumMax, "summary-max-series", capture.DefaultSummaryMaxSeries, "with --summary: the most rows (label sets) kept; queries past it are counted as dropped")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until Ctrl-C or the process exits)")
	f.Uint32Var(&flush, "flush-size", accum.DefaultFlushSize, "accumulating channel flush size (power of two, 64..16384)")
	f.DurationVar(&latency, "latency", accum.DefaultLatency, "longest a byte waits in the kernel batch")
	f.Uint32Var(&ring, "ring-size", capture.DefaultRingSize, "accumulating channel ring buffer bytes (power of two): must hold the largest TLS write on every CPU")
	return c
}
