package capturebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cistern-ebpf/cistern/accum"
	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/mounts"
	"github.com/cistern-ebpf/cistern/internal/servers"
)

// The churn mode: the harness of ecapture's loss reports. churnConns
// short-lived TLS connections (psql, sslmode=require), churnInFlight at a
// time, each one query whose answer is one row of churnSizes[i % 8] bytes
// (4 KiB to 1 MiB, 96 KiB the median), against a PostgreSQL of its own.
// The server and the clients run in one cgroup-v2 group, captured with
// every default (both transports, both sides): each query crosses the
// channel twice, once per side.
const (
	churnConns    = 160
	churnInFlight = 16
	// churnDrainIdle: silence after the last psql that ends the read.
	churnDrainIdle = 10 * time.Second
)

var churnSizes = []int{4 << 10, 16 << 10, 64 << 10, 96 << 10, 96 << 10, 128 << 10, 256 << 10, 1 << 20}

type churnResult struct {
	issued, server, client float64
	lostEvents, lostBytes  float64
	gaps, payloadBytes     float64
	secs, cpuPct           float64
	drainSecs              float64 // after the last psql exited, until its last query was read
	bySide                 bool    // false: no cgroup, the server side alone
	stats                  accum.Stats
}

func runChurn(ctx context.Context, cert *servers.TLSCert, port int, ring uint32, hold bool) (churnResult, error) {
	var r churnResult
	pg, err := servers.StartPostgres(servers.PostgresOptions{Port: port, Conf: cert.PostgresConf()})
	if err != nil {
		return r, err
	}
	defer pg.Stop()
	ppid, err := pg.PID()
	if err != nil {
		return r, err
	}
	opt := capture.Options{PID: ppid, Children: true}
	var cg string
	if roots := mounts.MountPoints("cgroup2"); len(roots) > 0 {
		dir := filepath.Join(roots[0], fmt.Sprintf("cistern-churn-%d", os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err == nil {
			defer func() {
				// The server leaves with its processes before the group goes.
				if pids, err := capture.CgroupPIDs(dir); err == nil {
					for _, p := range pids {
						os.WriteFile(filepath.Join(roots[0], "cgroup.procs"), []byte(strconv.Itoa(p)), 0)
					}
				}
				os.Remove(dir)
			}()
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(ppid)), 0); err == nil {
				cg, opt = dir, capture.Options{Cgroup: dir}
				r.bySide = true
			}
		}
	}
	opt.Accum.RingSize = ring // 0: the default
	opt.HoldNew = hold
	c, err := capture.Open(opt)
	if err != nil {
		return r, err
	}
	defer c.Close()

	tok := strconv.FormatInt(time.Now().UnixNano(), 36)
	seen := [2]map[string]bool{{}, {}} // by side: server, client
	var failed error
	var wg sync.WaitGroup
	var mu sync.Mutex
	finished := make(chan struct{})
	cpu0, t0 := benchkit.SelfCPU(), time.Now()
	go func() {
		defer close(finished)
		sem := make(chan struct{}, churnInFlight)
		for i := 0; i < churnConns && ctx.Err() == nil; i++ {
			sem <- struct{}{}
			wg.Add(1)
			go func(i int) {
				defer func() { <-sem; wg.Done() }()
				q := fmt.Sprintf("SELECT 'churn-%s-%d' AS mark, repeat('x', %d) AS answer;", tok, i, churnSizes[i%len(churnSizes)])
				conn := fmt.Sprintf("sslmode=require host=127.0.0.1 port=%d user=postgres dbname=postgres", port)
				args := []string{pg.Bin("psql"), "-X", "-q", "-A", "-t", "-o", "/dev/null", conn, "-c", q}
				cmd := exec.CommandContext(ctx, args[0], args[1:]...)
				if cg != "" { // born in the group: captured from its first call
					cmd = exec.CommandContext(ctx, "sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg}, args...)...)
				}
				out, err := cmd.CombinedOutput()
				mu.Lock()
				defer mu.Unlock()
				if err != nil && failed == nil {
					failed = fmt.Errorf("psql %d: %v: %s", i, err, out)
				}
				if err == nil {
					r.issued++
				}
			}(i)
		}
		wg.Wait()
	}()
	// After the last psql exits, read until every issued query was seen
	// (on both sides when captured by group), or until nothing came for
	// churnDrainIdle. A fixed 1 s of silence ended the read while the tail
	// was still on its way on a loaded machine (the trial: the pump thread
	// waited for a CPU; 145 of 160 "captured", lost 0): a query that comes
	// late is not lost, and one never seen after 10 s of silence is.
	done := false
	var doneAt time.Time
	complete := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return float64(len(seen[0])) >= r.issued && (cg == "" || float64(len(seen[1])) >= r.issued)
	}
	for idle := time.Now(); !done || (time.Since(idle) < churnDrainIdle && !complete()); {
		qs, err := c.Next(100 * time.Millisecond)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			<-finished
			return r, err
		}
		for _, q := range qs {
			if !strings.Contains(q.Query, "'churn-"+tok+"-") {
				continue
			}
			side := 0
			if q.Side == capture.SideClient {
				side = 1
			}
			mu.Lock()
			if !seen[side][q.Query] && done {
				r.drainSecs = time.Since(doneAt).Seconds()
			}
			seen[side][q.Query] = true
			mu.Unlock()
		}
		if len(qs) > 0 {
			idle = time.Now()
		}
		if !done {
			select {
			case <-finished:
				done, idle, doneAt = true, time.Now(), time.Now()
				r.secs = time.Since(t0).Seconds()
			default:
			}
		}
	}
	r.cpuPct = (benchkit.SelfCPU() - cpu0).Seconds() / time.Since(t0).Seconds() * 100
	if failed != nil {
		return r, failed
	}
	st, err := c.Stats()
	if err != nil {
		return r, err
	}
	r.server, r.client = float64(len(seen[0])), float64(len(seen[1]))
	r.lostEvents = float64(st.LostRecords + st.BusyDrops + st.NoConn + st.Faults)
	r.lostBytes = float64(st.LostBytes)
	r.gaps = float64(len(c.Gaps()))
	r.payloadBytes = float64(st.PayloadBytes)
	r.stats = st
	return r, nil
}

// churnTotals gathers the churn mode's rounds: each round's figures are
// samples (median [min–max]); the targets are on the sums, since one lost
// query in any round is a loss.
type churnTotals struct {
	rounds                 int
	issued, server, client float64
	lostEvents             float64
	bySide                 bool
}

func (t *churnTotals) add(rep *benchkit.Report, r churnResult) {
	if t.rounds == 0 {
		rep.SetConfig("churn_workload", fmt.Sprintf("%d psql connections over TLS, %d in flight, one query each, "+
			"answers of 4 KiB to 1 MiB (median 96 KiB); capture defaults", churnConns, churnInFlight))
	}
	t.rounds++
	t.issued += r.issued
	t.server += r.server
	t.client += r.client
	t.lostEvents += r.lostEvents
	t.bySide = r.bySide
	s := func(k string, v float64) { rep.Sample("churn", k, v) }
	s("queries_issued", r.issued)
	s("queries_captured", r.server)
	if r.bySide {
		s("queries_captured_client", r.client)
	}
	s("lost_events", r.lostEvents)
	s("lost_bytes", r.lostBytes)
	s("sequence_gaps", r.gaps)
	s("lost_records", float64(r.stats.LostRecords))
	s("busy_drops", float64(r.stats.BusyDrops))
	s("table_full_drops", float64(r.stats.NoConn))
	s("faults", float64(r.stats.Faults))
	s("wakeups", float64(r.stats.Wakeups))
	s("records", float64(r.stats.Records))
	s("payload_mb", r.payloadBytes/1e6)
	s("seconds", r.secs)
	s("drain_seconds", r.drainSecs)
	s("agent_cpu_pct", r.cpuPct)
}

func (t *churnTotals) targets(rep *benchkit.Report) {
	rep.Target("churn queries_captured == queries_issued (all rounds)", t.server, "==", t.issued)
	if t.bySide {
		rep.Target("churn queries_captured_client == queries_issued (all rounds)", t.client, "==", t.issued)
		rep.Note("churn: server and clients in one cgroup-v2 group, captured by it: queries_captured is the server side, queries_captured_client the psql side")
	} else {
		rep.Note("churn: no cgroup v2: the postmaster captured by pid (server side only)")
	}
	rep.Target("churn lost_events (all rounds)", t.lostEvents, "==", 0)
}
