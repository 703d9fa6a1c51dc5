package cbufbench

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// wrk 4.1 output (Debian 12) with latencies in three units and errors.
const wrkOut = `Running 2s test @ http://127.0.0.1:18100/gen?size=1048576
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    40.61ms   77.51ms 513.72ms   91.24%
    Req/Sec   183.11    120.43   410.00     61.54%
  Latency Distribution
     50%    6.05ms
     75%   34.26ms
     90%  117.19ms
     99%  513.72ms
  996 requests in 2.10s, 1.02GB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:    474.29
Transfer/sec:    497.32MB
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk(wrkOut)
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 474.29 || r.requests != 996 || math.Abs(r.p99ms-513.72) > 1e-9 || r.errors != 7 {
		t.Fatalf("parsed %+v", r)
	}
	for _, c := range []struct {
		line string
		ms   float64
	}{{"     99%  870.00us\n", 0.87}, {"     99%    1.20s\n", 1200}} {
		r, err := parseWrk("10 requests in 1s\nRequests/sec: 10\n" + c.line)
		if err != nil || math.Abs(r.p99ms-c.ms) > 1e-9 || r.errors != 0 {
			t.Fatalf("%q: %+v %v", c.line, r, err)
		}
	}
	if _, err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused\n"); err == nil {
		t.Fatal("wrk's connection failure parsed as a result")
	}
}

func TestWebPhaseDemand(t *testing.T) {
	ph := webPhase{6, 6, 10, 5, 3}
	for _, c := range []struct {
		t    float64
		want int
	}{{0, 0}, {5.9, 0}, {6, 5}, {9, 5 + (webIfPeak-5)/2}, {12, webIfPeak}, {21.9, webIfPeak}, {22, 10}, {26.9, 10}, {27, 0}} {
		if got := ph.demand(c.t); got != c.want {
			t.Errorf("demand(%v) = %d, want %d", c.t, got, c.want)
		}
	}
}

// TestExampleProgram builds examples/cbufweb as the web workload does and
// runs a cbufweb server through it against an in-process manager: its
// started line, a checked body, a wrong body refused, and the CPU of its
// processes counted.
func TestExampleProgram(t *testing.T) {
	testenv.RequireRoot(t) // cgroup CPU accounting
	testenv.NeedTool(t, "cc", "gcc")
	testenv.NeedTool(t, "go", "golang")
	ctx := context.Background()
	dir := t.TempDir()
	prog, err := buildExample(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cbuf.sock")
	m, err := cbuf.NewManager(cbuf.ManagerOptions{Socket: sock, Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(mctx) }()
	defer func() { cancel(); <-done }()
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	srv, err := startExample(sctx, prog, "--server", "cbufweb", "--bins", dir, "--dir", filepath.Join(dir, "web"), "--cbuf", sock, "--group")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	url := srv.URL + "/gen?size=65536&seed=3"
	if err := checkBody(ctx, prog, url, 65536, 3, false); err != nil {
		t.Fatal(err)
	}
	if err := checkBody(ctx, prog, url, 65536, 4, false); err == nil {
		t.Fatal("a body of seed 3 passed the check for seed 4")
	}
	cpu, err := srv.CPU()
	if err != nil || cpu <= 0 {
		t.Fatalf("server CPU %v, %v", cpu, err)
	}
}
