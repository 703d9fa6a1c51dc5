// Package query is `cistern query`: SQL over kernel events, compiled into
// eBPF built only from ahead-of-time verified templates plus user-space
// operators, so every valid query loads. Run is the whole pipeline.
package query

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/metrics"
	"github.com/cistern-ebpf/cistern/query/exec"
	"github.com/cistern-ebpf/cistern/query/kern"
	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/plan"
	"github.com/cistern-ebpf/cistern/query/sema"
)

// Error is a positioned error in a query (line, column, caret and reason):
// the query is wrong (the CLI exits with status 2).
type Error = parse.Error

// OptionError is a bad field of Options, or an option the query cannot
// have (--plot of raw rows): the caller's input is wrong, not the kernel's
// answer (the CLI exits with status 2).
type OptionError struct{ Err error }

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

func optionErrorf(format string, a ...any) error {
	return &OptionError{fmt.Errorf(format, a...)}
}

// ErrNotRoot is Run's answer to a caller that is not root: loading the
// query's programs needs it.
var ErrNotRoot = errors.New("loading a query's BPF programs needs root")

// Modes.
const (
	ModeOptimizer = "optimizer"
	ModeMVSFOnly  = "mvsf_only"
)

// Options configure Run.
type Options struct {
	Duration time.Duration // 0: until ctx is done
	Mode     string        // "optimizer" (default) or "mvsf_only"
	Out      io.Writer     // rows; nil: discarded
	Format   string        // table (default), json, csv
	Explain  io.Writer     // nil: no plan printed; else also BPF run-time statistics (they cost every BPF program on the machine two clock reads per run)

	// OnLoaded, when set, is called once the chosen plan is loaded and
	// attached, before events are read.
	OnLoaded func()

	// Plot, when set, draws the first numeric aggregate per group to this
	// PNG (lines over windows, or bars).
	Plot string

	// Metrics, when set, serves the kernel counters at HOST:PORT/metrics
	// (Prometheus) while the query runs; OnMetrics learns the address.
	Metrics   string
	OnMetrics func(addr string)

	// Window, when set, is the window of a query that has no WINDOW clause
	// (the exporter's default window).
	Window time.Duration
	// OnWindow, when set, is called after each window's rows were written
	// to Out (windowed queries only).
	OnWindow func(endNs int64)

	// SampleRate is how long the optimizer samples event rates (default 100ms).
	SampleRate time.Duration
	// Refuse makes the named plans fail as if the verifier refused them
	// (tests of the fallback).
	Refuse map[string]bool
}

// Result summarises a run.
type Result struct {
	Events     uint64 // rows that matched WHERE (the input of aggregation or output)
	LostEvents uint64 // ring buffer full, aggregation or join map full
	LateEvents uint64 // aggregated after their window was read: reported with the next window
	// SkippedEvents: runs of the plan's programs the kernel skipped (a run
	// of the same program under way on that CPU: kern.Prog.SkippedRuns).
	SkippedEvents uint64
	Rows          int    // output rows written
	Plan          string // the chosen plan's name
}

// Compile parses and checks sql without loading anything.
func Compile(sql string) (*sema.Query, error) {
	pq, err := parse.Parse(sql)
	if err != nil {
		return nil, err
	}
	return sema.Check(pq)
}

func (o *Options) validate() error {
	switch o.Mode {
	case "":
		o.Mode = ModeOptimizer
	case ModeOptimizer, ModeMVSFOnly:
	default:
		return optionErrorf("mode %q: want optimizer or mvsf_only", o.Mode)
	}
	switch o.Format {
	case "":
		o.Format = "table"
	case "table", "json", "csv":
	default:
		return optionErrorf("format %q: want table, json or csv", o.Format)
	}
	if o.Duration < 0 {
		return optionErrorf("duration must not be negative")
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.SampleRate <= 0 {
		o.SampleRate = 100 * time.Millisecond
	}
	return nil
}

// monoNs is CLOCK_MONOTONIC in ns, the clock of the kernel's timestamps.
func monoNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Run compiles, loads, runs until ctx is done or opt.Duration passes, and
// writes rows to opt.Out.
func Run(ctx context.Context, sql string, opt Options) (*Result, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	q, err := Compile(sql)
	if err != nil {
		return nil, err
	}
	if q.Window == 0 && opt.Window > 0 && q.Grouped {
		q.Window = opt.Window
	}
	if opt.Plot != "" && !q.Grouped {
		return nil, optionErrorf("--plot needs an aggregate query (GROUP BY or an aggregate)")
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if opt.Explain != nil {
		// --explain also reports what the chosen plan costs in the kernel
		if c, err := kern.EnableRunStats(); err == nil {
			defer c.Close()
		}
	}
	ch, err := plan.Choose(q, opt.Mode == ModeMVSFOnly, opt.SampleRate, opt.Refuse)
	if opt.Explain != nil && ch != nil {
		ch.Explain(opt.Explain, q)
	}
	if err != nil {
		return nil, err
	}
	prog, p := ch.Prog, ch.Chosen
	defer prog.Close()
	if opt.OnLoaded != nil {
		opt.OnLoaded()
	}
	if opt.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.Duration)
		defer cancel()
	}
	if opt.Metrics != "" {
		addr, err := metrics.Serve(ctx, opt.Metrics, metrics.NewCounterSet("cistern", "query", func() (map[string]uint64, error) {
			st := prog.Stats()
			return map[string]uint64{"hook_events_total": st[kern.StEvents], "matched_in_kernel_total": st[kern.StMatched],
				"emitted_total": st[kern.StEmitted], "lost_ring_total": st[kern.StLostRB],
				"lost_aggregation_total": st[kern.StLostAgg], "lost_join_total": st[kern.StLostJoin],
				"late_aggregation_total": prog.LateUpdates()}, nil
		}))
		if err != nil {
			return nil, err
		}
		if opt.OnMetrics != nil {
			opt.OnMetrics(addr)
		}
	}
	eng := exec.New(q, p.Residual, opt.Out, opt.Format)
	if opt.Plot != "" {
		if err := eng.EnablePlot(); err != nil {
			return nil, &OptionError{err}
		}
	}
	res := &Result{Plan: p.Name}
	err = loop(ctx, q, p, prog, eng, opt.OnWindow)
	st := prog.Stats()
	res.LostEvents = st[kern.StLostRB] + st[kern.StLostAgg] + st[kern.StLostJoin]
	res.LateEvents = prog.LateUpdates()
	res.SkippedEvents = prog.SkippedRuns()
	res.Events = eng.Matched()
	res.Rows = eng.Rows()
	if opt.Explain != nil {
		for _, rs := range prog.RunStats() {
			fmt.Fprintf(opt.Explain, "measured: %s ran %d times, %.0f ns per run (BPF run-time statistics)\n", rs.Prog, rs.Runs, rs.NsPerRun)
		}
	}
	if err == nil && opt.Plot != "" {
		err = eng.WritePlot(opt.Plot)
	}
	return res, err
}

func loop(ctx context.Context, q *sema.Query, p *plan.Physical, prog *kern.Prog, eng *exec.Engine, onWindow func(int64)) error {
	rb := prog.Reader()
	var tick <-chan time.Time
	if q.Window > 0 {
		t := time.NewTicker(q.Window)
		defer t.Stop()
		tick = t.C
	}
	closeWindow := func() error {
		if p.Aggregated() {
			parts, err := prog.SwapEpoch()
			if err != nil {
				return err
			}
			for _, pt := range parts {
				eng.Partial(p.Kernel.Keys, pt)
			}
		}
		end := monoNs()
		if err := eng.Window(end); err != nil {
			return err
		}
		if onWindow != nil {
			onWindow(end)
		}
		return nil
	}
	var rec ringbuf.Record
	slots := make([]uint64, kern.NSlot+1)
	proj := p.Kernel.Emit == kern.EmitProj // projected records carry no kind slot
	// read processes records until the ring is empty at deadline; unless
	// draining (hooks detached), it also returns once deadline has passed.
	read := func(deadline time.Time, drain bool) (bool, error) {
		rb.SetDeadline(deadline)
		for n := 1; ; n++ {
			// a ring that never runs dry must not starve windows and the end
			if !drain && n%1024 == 0 && time.Now().After(deadline) {
				return false, nil
			}
			if err := rb.ReadInto(&rec); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return false, nil
				}
				return false, err
			}
			n := len(rec.RawSample) / 8
			if n > len(slots) {
				n = len(slots)
			}
			for i := 0; i < n; i++ {
				slots[i] = binary.LittleEndian.Uint64(rec.RawSample[8*i:])
			}
			if proj {
				eng.Record(kern.KindProj, slots[:n], p.Kernel.Proj)
			} else {
				eng.Record(slots[0], slots[1:n], p.Kernel.Proj)
			}
			if eng.Done() {
				return true, nil
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return finish(q, p, prog, eng, rb, read, closeWindow)
		case <-tick:
			if err := closeWindow(); err != nil {
				return err
			}
			continue
		default:
		}
		if rb == nil {
			select {
			case <-ctx.Done():
			case <-tick:
				if err := closeWindow(); err != nil {
					return err
				}
			}
			continue
		}
		done, err := read(time.Now().Add(50*time.Millisecond), false)
		if err != nil {
			return err
		}
		if done {
			return eng.Finish(monoNs())
		}
		if err := eng.Flush(); err != nil {
			return err
		}
	}
}

// finish detaches the hooks (no new events), drains what the kernel still
// holds and writes the last window or the ordered rows.
func finish(q *sema.Query, p *plan.Physical, prog *kern.Prog, eng *exec.Engine, rb *ringbuf.Reader,
	read func(time.Time, bool) (bool, error), closeWindow func() error) error {
	prog.Detach()
	if rb != nil {
		if _, err := read(time.Now(), true); err != nil {
			return err
		}
	}
	if q.Grouped {
		return closeWindow()
	}
	return eng.Finish(monoNs())
}

// Schema writes the schema.
func Schema(w io.Writer) { sema.WriteSchema(w) }

// Check compiles sql and reports its error, if any (no root needed).
func Check(sql string) error {
	_, err := Compile(sql)
	return err
}
