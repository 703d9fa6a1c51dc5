package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	kvbench "github.com/cistern-ebpf/cistern/bench/kv"
	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/doctor"
	"github.com/cistern-ebpf/cistern/evict/replay"
	"github.com/cistern-ebpf/cistern/internal/cli"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/kernel"
)

// demoSegment is one system's part of `cistern demo`.
type demoSegment struct {
	name, what string
	run        func(cmd *cobra.Command) error
	system     string // kernel.Systems name: skipped where unavailable
}

func demoSegments() []demoSegment {
	return []demoSegment{
		{"Kerby-KV", "memcached GETs answered at XDP from a kernel block pool: kernel hit ratio and memory efficiency, live", demoKV, "kv"},
		{"capture", "TLS PostgreSQL queries captured through the accumulating channel, with loss counters", demoCapture, "accum/capture"},
		{"eviction policies", "a cache trace replayed through in-kernel policies, hit ratio per policy", demoEvict, "evict/cache"},
		{"page cache", "a file search in a tight memory cgroup, kernel LRU against an MRU agent", demoPagecache, "pagecache"},
		{"CBUF", "a two-process ping-pong over zero-copy buffers beside a pipe", demoCBuf, "cbuf"},
		{"query", "top syscalls by count, compiled from SQL to eBPF, with --explain", demoQuery, "query"},
		{"exporter", "a query's rows as Prometheus series: one scrape", demoExporter, "query"},
	}
}

func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run the doctor, then a few seconds of every system with real numbers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.RequireRoot("cistern demo"); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			start := time.Now()
			defer func() { fmt.Fprintf(out, "\ndemo: %.0f s in all\n", time.Since(start).Seconds()) }()
			banner(out, "doctor")
			rep := doctor.Run(cmd.Context(), doctor.Options{})
			rep.WriteTable(out)
			if !rep.CoreOK() {
				return fmt.Errorf("core checks failed: fix them (see above) and run the demo again")
			}
			status := map[string]kernel.System{}
			for _, s := range rep.Systems {
				status[s.Name] = s
			}
			for _, s := range demoSegments() {
				banner(out, s.name)
				t0 := time.Now()
				fmt.Fprintf(out, "shows: %s\n", s.what)
				if st := status[s.system]; st.Status == kernel.SystemUnavailable {
					fmt.Fprintf(out, "skipped: %s is unavailable on this kernel (%s)\n", s.system, st.Detail)
					continue
				}
				if err := s.run(cmd); err != nil {
					return fmt.Errorf("demo %s: %w", s.name, err)
				}
				fmt.Fprintf(out, "(%s: %.1f s)\n", s.name, time.Since(t0).Seconds())
			}
			return nil
		},
	}
}

// demoKV runs a few seconds of GET load against memcached alone and with
// Kerby-KV in front of it, printing throughput, the kernel hit ratio and the
// pool's memory efficiency every second.
func demoKV(cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	rep, err := kvbench.Run(cmd.Context(), kvbench.Options{
		Quick: true, Keys: 5000, Phase: 3 * time.Second, Skews: []float64{0.99},
		Modes: []string{"vanilla", "kerby"}, Clients: []string{"user-space"}, Rounds: 1,
		Live:     func(line string) { fmt.Fprintln(out, "  "+line) },
		Progress: func(step string) { fmt.Fprintln(out, "- "+step) },
	})
	if err != nil {
		return err
	}
	r, _ := rep.Get("user-space kerby", "mops_per_sec")
	v, _ := rep.Get("user-space vanilla", "mops_per_sec")
	h, _ := rep.Get("user-space kerby", "kernel_hit_ratio")
	m, _ := rep.Get("user-space kerby", "memory_efficiency")
	w, _ := rep.Get("user-space kerby", "wrong_values")
	fmt.Fprintf(out, "result: kerby %.0f ops/s vs memcached alone %.0f ops/s (x%.2f); kernel hit ratio %.3f; memory efficiency %.3f; wrong values %v\n",
		r.(float64)*1e6, v.(float64)*1e6, r.(float64)/max(v.(float64), 1e-9), h, m, w)
	return nil
}

// demoCapture starts PostgreSQL with TLS, runs psql against it and prints
// what the uprobes on libssl captured through the accumulating channel.
func demoCapture(cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	tc, err := servers.NewTLSCert()
	if err != nil {
		return err
	}
	defer tc.Remove()
	pg, err := servers.StartPostgres(servers.PostgresOptions{Port: 54361, Conf: tc.PostgresConf()})
	if err != nil {
		return err
	}
	defer pg.Stop()
	statements := []string{
		"CREATE TABLE demo (id int, name text);",
		"INSERT INTO demo SELECT g, 'row ' || g FROM generate_series(1, 100) g;",
		"SELECT count(*) FROM demo WHERE id % 7 = 0;",
		"SELECT name FROM demo ORDER BY id DESC LIMIT 3;",
		"SELECT * FROM missing_table;",
	}
	fmt.Fprintf(out, "PostgreSQL with TLS on %s; psql sslmode=require sends %d statements\n", pg.Addr(), len(statements))
	run, err := capture.CapturePsql(pg.Bin("psql"),
		fmt.Sprintf("sslmode=require host=127.0.0.1 port=%d user=postgres dbname=postgres", pg.Opt.Port), statements, capture.Options{})
	if err != nil {
		return err
	}
	for _, q := range run.Queries {
		// One record carried all five exchanges; each still has its own
		// latency, from the per-turn times inside the batch.
		exact := "exact"
		if !q.LatencyExact {
			exact = "bound"
		}
		line := fmt.Sprintf("  %-60s rows %-4d %8.0f us (%s)  %s %s %s %s->%s", q.Query, q.Rows, q.LatencyUS, exact,
			q.Comm, q.Side, q.Transport+"/"+q.Library, q.Local, q.Remote)
		if q.Error != "" {
			line += "  " + q.Error
		}
		fmt.Fprintln(out, line)
	}
	st := run.Stats
	fmt.Fprintf(out, "captured %d of %d; channel: %d records for %d payload bytes (%.2f ring bytes per payload byte); lost %d records, %d bytes; %d sequence gaps\n",
		len(run.Queries), len(statements), st.Records, st.PayloadBytes, st.RingPerPayload(), st.LostRecords, st.LostBytes, len(run.Gaps))
	return demoSpan(out, run.Queries)
}

// demoEvict replays the bundled Twitter trace through the in-kernel
// policies at one cache size.
func demoEvict(cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	path := filepath.Join(replay.TraceDir(), "twitter_cluster52_1m.csv.zst")
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintln(out, "status: skipped: the bundled traces (../shared/data/traces, or $CISTERN_TRACES) are not on this machine")
		return nil
	}
	reqs, err := replay.ReadFile(path, "twitter")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "trace %s: %d requests; cache of 10000 objects\n", filepath.Base(path), len(reqs))
	for _, p := range []string{"fifo", "lru", "clock", "sieve", "s3fifo", "lhd"} {
		r, err := replay.Run(reqs, replay.Options{Policy: p, Size: 10000, Trace: filepath.Base(path)})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %-6s hit ratio %.4f  %5.1f M requests/s in the kernel  fallbacks %d\n",
			p, r.HitRatio, r.RequestsPerSec/1e6, r.Fallbacks)
	}
	return nil
}

func banner(w io.Writer, title string) {
	fmt.Fprintf(w, "\n=== %s ===\n", title)
}
