package exporter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// series is one label set of a query.
type series struct {
	labels   []string
	counters map[int]float64            // column -> running total
	gauges   map[int]float64            // column -> value in the last window the series was in
	buckets  map[int]map[float64]uint64 // column -> le -> count in that bucket (not cumulative)
	sums     map[int]float64            // column -> estimated sum of a HIST
	seen     bool                       // in the last window (non-cumulative histograms show only then)
}

// state is a query's series, fed by its JSON rows, read by Collect.
type state struct {
	q    Query
	cols []column
	lbl  []int // indices of label columns
	desc map[int]*prometheus.Desc

	mu      sync.Mutex
	partial []byte             // a JSON line not yet complete
	pending []map[string]any   // rows of the window being written
	series  map[string]*series // by joined label values
	dropped uint64             // rows whose label set was past MaxSeries
	windows uint64
	bad     uint64 // rows that were not JSON objects (a bug: counted, not fatal)
}

func newState(q Query, cols []column) *state {
	s := &state{q: q, cols: cols, desc: map[int]*prometheus.Desc{}, series: map[string]*series{}}
	var lnames []string
	for i, c := range cols {
		if c.kind == kLabel {
			s.lbl = append(s.lbl, i)
			lnames = append(lnames, c.name)
		}
	}
	for i, c := range cols {
		switch c.kind {
		case kLabel:
		case kQuantile:
			s.desc[i] = prometheus.NewDesc(c.name, c.help, append(append([]string{}, lnames...), "quantile"), nil)
		default:
			s.desc[i] = prometheus.NewDesc(c.name, c.help, lnames, nil)
		}
	}
	return s
}

// Write takes the engine's JSON rows (one object per line, maybe split
// across writes).
func (s *state) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		line := s.partial[:i]
		var row map[string]any
		d := json.NewDecoder(bytes.NewReader(line))
		d.UseNumber()
		if len(bytes.TrimSpace(line)) > 0 {
			if d.Decode(&row) != nil {
				s.bad++
			} else {
				s.pending = append(s.pending, row)
			}
		}
		s.partial = s.partial[i+1:]
	}
	return len(p), nil
}

// window commits the rows written since the last window.
func (s *state) window() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.windows++
	for _, se := range s.series {
		se.seen = false
	}
	for _, row := range s.pending {
		vals := make([]string, len(s.lbl))
		for j, i := range s.lbl {
			vals[j] = labelValue(row[s.cols[i].key])
		}
		k := strings.Join(vals, "\x00")
		se := s.series[k]
		if se == nil {
			if len(s.series) >= s.q.MaxSeries {
				s.dropped++
				continue
			}
			se = &series{labels: vals, counters: map[int]float64{}, gauges: map[int]float64{}, buckets: map[int]map[float64]uint64{}, sums: map[int]float64{}}
			s.series[k] = se
		}
		se.seen = true
		cum := s.q.cumulative()
		for i, c := range s.cols {
			v := row[c.key]
			switch c.kind {
			case kCounter:
				se.counters[i] += number(v)
			case kGauge, kQuantile:
				if f := number(v); !math.IsNaN(f) {
					se.gauges[i] = f
				}
			case kHistogram:
				b := se.buckets[i]
				if b == nil || !cum {
					b = map[float64]uint64{}
					se.buckets[i], se.sums[i] = b, 0
				}
				se.sums[i] += addBuckets(b, v)
			}
		}
	}
	s.pending = s.pending[:0]
}

// labelValue renders a JSON value as a label value.
func labelValue(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}

func number(v any) float64 {
	if n, ok := v.(json.Number); ok {
		f, err := n.Float64()
		if err == nil {
			return f
		}
	}
	return math.NaN()
}

// addBuckets adds a HIST value ([{min,max,count}], log2 buckets of
// integers) to b, keyed by each bucket's inclusive upper bound, and returns
// the sum it estimates: HIST keeps no sum, so each value counts as its
// bucket's midpoint (documented).
func addBuckets(b map[float64]uint64, v any) (sum float64) {
	list, _ := v.([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		lo, hi, cnt := number(m["min"]), number(m["max"]), number(m["count"])
		if math.IsNaN(hi) || math.IsNaN(cnt) || cnt < 0 {
			continue
		}
		if math.IsNaN(lo) {
			lo = hi
		}
		b[hi] += uint64(cnt)
		sum += cnt * (lo + hi) / 2
	}
	return sum
}

// cumulative turns bucket counts into Prometheus' cumulative form.
func cumulative(b map[float64]uint64) (count uint64, cum map[float64]uint64) {
	les := make([]float64, 0, len(b))
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	cum = map[float64]uint64{}
	for _, le := range les {
		count += b[le]
		cum[le] = count
	}
	return count, cum
}

// collect sends the current series.
func (s *state) collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, se := range s.series {
		for i, c := range s.cols {
			d := s.desc[i]
			switch c.kind {
			case kCounter:
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, se.counters[i], se.labels...)
			case kGauge:
				if v, ok := se.gauges[i]; ok {
					ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, se.labels...)
				}
			case kQuantile:
				if v, ok := se.gauges[i]; ok {
					ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(append([]string{}, se.labels...), c.quantile)...)
				}
			case kHistogram:
				if b := se.buckets[i]; b != nil && (se.seen || s.q.cumulative()) {
					n, cum := cumulative(b)
					ch <- prometheus.MustNewConstHistogram(d, n, se.sums[i], cum, se.labels...)
				}
			}
		}
	}
}
