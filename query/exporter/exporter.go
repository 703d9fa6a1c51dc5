package exporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cistern-ebpf/cistern/internal/metrics"
	"github.com/cistern-ebpf/cistern/query"
)

// Exporter runs the queries of a Config and serves their series.
type Exporter struct {
	cfg    Config
	states []*state
	self   *prometheus.Desc
	errs   chan error

	mu   sync.Mutex
	lost map[string]uint64 // events a finished query lost (ring, map full)
}

// New compiles every query (a bad one is a usage error naming it) and maps
// its columns; nothing is loaded yet.
func New(cfg Config) (*Exporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Exporter{cfg: cfg, lost: map[string]uint64{}}
	for _, q := range cfg.Queries {
		sq, err := query.Compile(q.SQL)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", q.Name, err)
		}
		cols, err := columns(q.Name, sq, q.cumulative())
		if err != nil {
			return nil, err
		}
		e.states = append(e.states, newState(q, cols))
	}
	return e, nil
}

var (
	descDropped = prometheus.NewDesc("cistern_exporter_series_dropped_total", "rows dropped because their query already had max_series label sets", []string{"query"}, nil)
	descSeries  = prometheus.NewDesc("cistern_exporter_series", "label sets a query holds", []string{"query"}, nil)
	descWindows = prometheus.NewDesc("cistern_exporter_windows_total", "windows a query closed", []string{"query"}, nil)
	descBad     = prometheus.NewDesc("cistern_exporter_bad_rows_total", "rows the exporter could not read", []string{"query"}, nil)
)

// Describe is empty: the series are known only as windows close (an
// unchecked collector).
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect sends every query's series and the exporter's own counters.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	for _, s := range e.states {
		s.collect(ch)
		s.mu.Lock()
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.dropped), s.q.Name)
		ch <- prometheus.MustNewConstMetric(descSeries, prometheus.GaugeValue, float64(len(s.series)), s.q.Name)
		ch <- prometheus.MustNewConstMetric(descWindows, prometheus.CounterValue, float64(s.windows), s.q.Name)
		ch <- prometheus.MustNewConstMetric(descBad, prometheus.CounterValue, float64(s.bad), s.q.Name)
		s.mu.Unlock()
	}
}

// Run serves /metrics on cfg.Listen (onListen learns the address) and runs
// every query until ctx is done or one fails.
func (e *Exporter) Run(ctx context.Context, onListen func(addr string)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr, err := metrics.Serve(ctx, e.cfg.Listen, e)
	if err != nil {
		return err
	}
	if onListen != nil {
		onListen(addr)
	}
	errc := make(chan error, len(e.states))
	for _, s := range e.states {
		s := s
		go func() {
			res, err := query.Run(ctx, s.q.SQL, query.Options{
				Format: "json", Out: s, Window: s.q.Window,
				OnWindow: func(int64) { s.window() },
			})
			if err != nil {
				err = fmt.Errorf("query %s: %w", s.q.Name, err)
			} else if res != nil && res.LostEvents > 0 {
				e.mu.Lock()
				e.lost[s.q.Name] = res.LostEvents
				e.mu.Unlock()
			}
			errc <- err
		}()
	}
	var first error
	for range e.states {
		if err := <-errc; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
			cancel() // one query failed: stop the others
		}
	}
	return first
}

// Lost reports, after Run, the events each query lost in the kernel.
func (e *Exporter) Lost() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lost
}

var _ io.Writer = (*state)(nil)
