package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/capture/otlp"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/query/exporter"
)

// demoExporter runs one named query as Prometheus series while dd makes a
// known number of syscalls, and prints one scrape of its series.
func demoExporter(cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	sql := "SELECT comm, syscall, COUNT(*) AS calls, HIST(latency_ns) AS lat FROM syscalls WHERE comm = 'dd' GROUP BY comm, syscall"
	fmt.Fprintf(out, "$ cistern exporter --query dd=%q --window 1s\n", sql)
	e, err := exporter.New(exporter.Config{Listen: "127.0.0.1:0", Window: time.Second, Queries: []exporter.Query{{Name: "dd", SQL: sql}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	addrc, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- e.Run(ctx, func(a string) { addrc <- a }) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		return err
	}
	time.Sleep(1500 * time.Millisecond) // the query loads and samples
	if err := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=2000", "status=none").Run(); err != nil {
		return err
	}
	time.Sleep(2500 * time.Millisecond) // the window closes
	r, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer r.Body.Close()
	fmt.Fprintf(out, "$ curl http://%s/metrics   (dd made 2,000 one-byte reads and writes)\n", addr)
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "cistern_query_dd_") && strings.Contains(l, `syscall="write"`) {
			fmt.Fprintln(out, "  "+l)
		}
	}
	cancel()
	return <-done
}

// demoSpan sends the captured queries as OTLP spans to a Jaeger v2 started
// for the demo and prints one span as Jaeger stored it.
func demoSpan(out io.Writer, qs []capture.Query) error {
	j, err := servers.StartJaeger()
	if servers.IsNotInstalled(err) {
		// make deps-demo leaves out Jaeger: it builds from source in minutes.
		fmt.Fprintln(out, "OTLP spans to Jaeger: skipped, Jaeger is not built here; add it with `sudo make deps-full` (~7 min, once)")
		return nil
	}
	if err != nil {
		return err
	}
	defer j.Stop()
	e, err := otlp.New(otlp.Options{Endpoint: "127.0.0.1:4317"})
	if err != nil {
		return err
	}
	for _, q := range qs {
		e.Send(q)
	}
	st := e.Close(10 * time.Second)
	fmt.Fprintf(out, "$ cistern capture ... --otlp 127.0.0.1:4317   (Jaeger v2 as the collector): %d spans exported, %d failed, %d dropped\n",
		st.Exported, st.Failed, st.Dropped)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		spans, err := j.Spans("cistern-capture")
		if err != nil || len(spans) == 0 {
			continue
		}
		s := spans[0]
		fmt.Fprintf(out, "one span from Jaeger's query API: %q kind %s, %v\n", s.Operation, s.Kind, s.Duration)
		for _, k := range []string{"db.system.name", "db.query.text", "db.operation.name", "db.namespace", "db.response.returned_rows",
			"server.address", "server.port", "client.address", "error.type"} {
			if v, ok := s.Tags[k]; ok {
				fmt.Fprintf(out, "  %-26s %v\n", k, v)
			}
		}
		return nil
	}
	return fmt.Errorf("no span reached Jaeger")
}
