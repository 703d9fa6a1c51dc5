package pagecachebench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/pagecache"
)

// Per-cgroup runs an auto per cgroup, each in a process of its own, as a
// user runs one `cistern cache agent --policy auto` per cgroup: each
// one's CPU is then its process's, and its cost is judged on its own
// (in one process, the shared figure was both autos', and RocksDB's auto
// was judged by the search's: session 29). The child is this binary
// re-executed with pcAutoChildEnv set to its pagecache.Config. It starts
// auto, prints {"cgroup": path} and then answers one line per command on
// stdin with one JSON line (autoChildMsg); decisions come as progress
// lines in between.
const pcAutoChildEnv = "CISTERN_PAGECACHE_AUTO_CHILD"

// The commands: "mark" begins the cost measurement, "cost" ends it,
// "stop" ends auto's loop and returns its decision and counters, "close"
// removes auto and its cgroup and ends the child.
type autoChildMsg struct {
	Progress string              `json:",omitempty"`
	Cgroup   string              `json:",omitempty"`
	Err      string              `json:",omitempty"`
	Cost     *autoChildCost      `json:",omitempty"`
	Decision *pagecache.Decision `json:",omitempty"`
	Stats    map[string]uint64   `json:",omitempty"`
}

// autoChildCost is one auto's cost between "mark" and "cost", in percent
// of one core: its process's CPU plus its BPF programs' run time in the
// workload's threads (bpf_stats, enabled by the parent), and the parts
// of it that can be told apart.
type autoChildCost struct {
	CPUPct, BPFPct, ShadowPct, AgentPct float64
}

func init() {
	if s := os.Getenv(pcAutoChildEnv); s != "" {
		var cfg pagecache.Config
		enc := json.NewEncoder(os.Stdout)
		if err := json.Unmarshal([]byte(s), &cfg); err != nil {
			enc.Encode(autoChildMsg{Err: err.Error()})
			os.Exit(1)
		}
		if err := runAutoChild(cfg, os.Stdin, enc); err != nil {
			enc.Encode(autoChildMsg{Err: err.Error()})
			os.Exit(1)
		}
		os.Exit(0)
	}
}

func runAutoChild(cfg pagecache.Config, in io.Reader, enc *json.Encoder) error {
	send := make(chan autoChildMsg, 64)
	done := make(chan struct{})
	go func() { // one writer: decisions come from auto's goroutine
		defer close(done)
		for m := range send {
			enc.Encode(m)
		}
	}()
	defer func() { close(send); <-done }()
	a, _, stop, err := startAuto(context.Background(), cfg, func(p string) {
		select {
		case send <- autoChildMsg{Progress: p}:
		default: // a progress line is not worth blocking auto for
		}
	})
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			stop()
			a.Close()
		}
	}()
	send <- autoChildMsg{Cgroup: a.Cgroup().Path}
	var cpu0, bpf0 time.Duration
	var own0 autoOwn
	var t0 time.Time
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch cmd := sc.Text(); cmd {
		case "mark":
			t0, cpu0, own0 = time.Now(), benchkit.SelfCPU(), ownCost(a)
			bpf0 = own0.bpf
			send <- autoChildMsg{}
		case "cost":
			wall := float64(max(time.Since(t0), time.Millisecond))
			o := ownCost(a)
			bpf := o.bpf - bpf0
			send <- autoChildMsg{Cost: &autoChildCost{
				CPUPct:    100 * float64(benchkit.SelfCPU()-cpu0+bpf) / wall,
				BPFPct:    100 * float64(bpf) / wall,
				ShadowPct: 100 * float64(o.shadow-own0.shadow) / wall,
				AgentPct:  100 * float64(max(o.agent-own0.agent, 0)) / wall,
			}}
		case "stop":
			stop()
			d := a.Decision()
			st, _ := a.Stats()
			send <- autoChildMsg{Decision: &d, Stats: st}
		case "close":
			closed = true
			if err := a.Close(); err != nil {
				return err
			}
			send <- autoChildMsg{}
			return nil
		default:
			return fmt.Errorf("auto child: unknown command %q", cmd)
		}
	}
	return errors.New("auto child: stdin closed before close")
}

// autoChild is one running auto child.
type autoChild struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	replies  chan autoChildMsg
	cg       *pagecache.Cgroup
	progress func(string)
	stopped  bool
	finished bool
}

// startAutoChild starts auto over cfg in a child process and opens the
// cgroup it made, for the workload to join.
func startAutoChild(ctx context.Context, cfg pagecache.Config, progress func(string)) (*autoChild, error) {
	cmd, in, out, err := execSelf(ctx, pcAutoChildEnv, cfg)
	if err != nil {
		return nil, err
	}
	c := &autoChild{cmd: cmd, stdin: in, replies: make(chan autoChildMsg, 4), progress: progress}
	go func() {
		defer close(c.replies)
		dec := json.NewDecoder(out)
		for {
			var m autoChildMsg
			if err := dec.Decode(&m); err != nil {
				return
			}
			if m.Progress != "" {
				if progress != nil {
					progress(m.Progress)
				}
				continue
			}
			c.replies <- m
		}
	}()
	m, err := c.reply()
	if err == nil && m.Cgroup == "" {
		err = errors.New("auto child: no cgroup")
	}
	if err == nil {
		c.cg, err = pagecache.OpenCgroup(m.Cgroup, 0)
	}
	if err != nil {
		in.Close()
		cmd.Wait()
		return nil, fmt.Errorf("auto child: %w", err)
	}
	return c, nil
}

func (c *autoChild) reply() (autoChildMsg, error) {
	m, ok := <-c.replies
	if !ok {
		return m, errors.New("auto child ended")
	}
	if m.Err != "" {
		return m, errors.New(m.Err)
	}
	return m, nil
}

func (c *autoChild) call(cmd string) (autoChildMsg, error) {
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		return autoChildMsg{}, fmt.Errorf("auto child %s: %w", cmd, err)
	}
	m, err := c.reply()
	if err != nil {
		err = fmt.Errorf("auto child %s: %w", cmd, err)
	}
	return m, err
}

// stop ends auto's loop (once), for modeRun.stop.
func (c *autoChild) stop() {
	if !c.stopped {
		c.stopped = true
		io.WriteString(c.stdin, "stop\n")
	}
}

// finish records what auto chose under mode m with its keys prefixed by
// key (as sampleAuto), shows it, and ends the child.
func (c *autoChild) finish(rep *benchkit.Report, m, key string, record bool) error {
	if c.finished {
		return nil
	}
	c.finished = true
	if !c.stopped {
		c.stop()
	}
	r, rerr := c.reply()
	if rerr == nil && record && r.Decision != nil {
		d := *r.Decision
		recordAuto(rep, m, key, d, r.Stats)
		if c.progress != nil {
			c.progress(autoEnd(d))
		}
	}
	c.cg.Close()
	_, cerr := c.call("close")
	c.stdin.Close()
	werr := c.cmd.Wait()
	return errors.Join(rerr, cerr, werr)
}

// childCostRun measures auto children's cost over one run's measured
// part, each under its key: start (nothing unless every child is there)
// enables BPF run-time statistics and marks each child, end records each
// one's cost under a mode (key+auto_cpu_share_pct, ..., key+
// auto_cost_bound) and returns the run's error, or else the
// measurement's.
type childCostRun struct {
	children map[string]*autoChild
	stats    io.Closer
	err      error
}

func (c *childCostRun) start(children map[string]*autoChild) {
	for _, ch := range children {
		if ch == nil {
			return
		}
	}
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		c.err = fmt.Errorf("enable BPF run-time statistics: %w", err)
		return
	}
	c.stats, c.children = st, children
	for _, ch := range children {
		if _, err := ch.call("mark"); err != nil {
			c.err = err
		}
	}
}

func (c *childCostRun) end(rep *benchkit.Report, m string, err error) error {
	if c.stats == nil {
		return errors.Join(err, c.err)
	}
	defer c.stats.Close()
	if err != nil || c.err != nil {
		return errors.Join(err, c.err)
	}
	for key, ch := range c.children {
		r, err := ch.call("cost")
		if err == nil && r.Cost == nil {
			err = errors.New("auto child: no cost in its reply")
		}
		if err != nil {
			return err
		}
		rep.Sample(m, key+"auto_cpu_share_pct", r.Cost.CPUPct)
		rep.Sample(m, key+"auto_bpf_share_pct", r.Cost.BPFPct)
		rep.Sample(m, key+"auto_shadow_share_pct", r.Cost.ShadowPct)
		rep.Sample(m, key+"auto_agent_share_pct", r.Cost.AgentPct)
		rep.Sample(m, key+"auto_cost_bound", 1-r.Cost.CPUPct/100)
	}
	return nil
}
