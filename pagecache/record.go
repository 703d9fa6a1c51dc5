package pagecache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/cistern-ebpf/cistern/pagecache/pctrace"
)

// Recorder writes a cgroup's page-access trace (package pctrace): the
// tracker's every add, delete and read of the watched files, no policy,
// nothing evicted. It costs the traced workload its tracepoints and this
// thread's copying (the page-cache bench measures it as probe_effect_pct);
// nothing records unless asked.
type Recorder struct {
	tr *tracker
	cg *Cgroup
}

// RecordConfig names what to record: the files under Dir charged to the
// memory cgroup Cgroup (created with Limit when Limit > 0, as Config).
type RecordConfig struct {
	Dir    string
	Cgroup string
	Limit  int64
}

// StartRecorder loads and attaches the tracker with every read reported.
func StartRecorder(cfg RecordConfig) (_ *Recorder, err error) {
	if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--dir %s: not a directory", cfg.Dir)
	}
	r := &Recorder{}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.cg, err = OpenCgroup(cfg.Cgroup, cfg.Limit); err != nil {
		return nil, err
	}
	if r.tr, err = openTracker(cfg.Dir, r.cg.ID, true, 1); err != nil {
		return nil, err
	}
	return r, nil
}

// Cgroup is the recorded cgroup (put the workload in it).
func (r *Recorder) Cgroup() *Cgroup { return r.cg }

// Run copies events into w until ctx ends, then drains what is queued.
func (r *Recorder) Run(ctx context.Context, w *pctrace.Writer) error {
	var rec ringbuf.Record
	for {
		done := ctx.Err() != nil
		if done {
			r.tr.rd.SetDeadline(time.Now())
		} else {
			r.tr.rd.SetDeadline(time.Now().Add(100 * time.Millisecond))
		}
		for {
			err := r.tr.rd.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return fmt.Errorf("read events: %w", err)
			}
			if len(rec.RawSample) < pctrace.RecordSize {
				continue
			}
			if err := w.WriteRaw(rec.RawSample); err != nil {
				return fmt.Errorf("write the trace: %w", err)
			}
			if !done && ctx.Err() != nil {
				break
			}
		}
		if done {
			return w.Flush()
		}
	}
}

// Stats are the tracker's counters; events_dropped > 0 means the trace
// lost events (the ring buffer was full).
func (r *Recorder) Stats() (map[string]uint64, error) { return r.tr.stats() }

// Files maps the trace's file ids to paths.
func (r *Recorder) Files() map[uint32]string {
	r.tr.mu.Lock()
	defer r.tr.mu.Unlock()
	m := make(map[uint32]string, len(r.tr.files))
	for k, v := range r.tr.files {
		m[k] = v
	}
	return m
}

// Close detaches the tracepoints and removes the cgroup if it made it.
func (r *Recorder) Close() error {
	var errs []error
	if r.tr != nil {
		errs = append(errs, r.tr.Close())
		r.tr = nil
	}
	if r.cg != nil {
		errs = append(errs, r.cg.Close())
		r.cg = nil
	}
	return errors.Join(errs...)
}
