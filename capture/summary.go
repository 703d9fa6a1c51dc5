package capture

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"

	"github.com/beorn7/perks/quantile"
	"github.com/prometheus/client_golang/prometheus"
)

// The audit summary (`cistern capture --summary`): per side, database user,
// client command (the comm of the process on that side: psql, node; a
// server-side record's is the server's) and statement fingerprint, the
// count, errors, rows and latency quantiles of the queries captured. Printed
// at exit and served as Prometheus series, MaxSeries label sets at most.

// DefaultSummaryMaxSeries bounds the summary's label sets (as the query
// exporter's default does).
const DefaultSummaryMaxSeries = 1000

// SummaryKey is one row's identity.
type SummaryKey struct {
	Side        string      `json:"side"`
	User        string      `json:"user"`
	Client      string      `json:"client"`
	Fingerprint Fingerprint `json:"fingerprint"`
}

// SummaryRow is one row of the summary.
type SummaryRow struct {
	SummaryKey
	Query  string  `json:"query"` // the statement, sanitized (literals as ?)
	Count  uint64  `json:"count"`
	Errors uint64  `json:"errors"`
	Rows   int64   `json:"rows"`
	P50US  float64 `json:"p50_us"`
	P99US  float64 `json:"p99_us"`
	SumUS  float64 `json:"-"`
}

type summaryEntry struct {
	row SummaryRow
	lat *quantile.Stream
}

// Summary aggregates queries; safe for concurrent use (Add from the record
// loop, Collect from scrapes).
type Summary struct {
	MaxSeries int // 0: DefaultSummaryMaxSeries
	mu        sync.Mutex
	rows      map[SummaryKey]*summaryEntry
	dropped   uint64 // queries whose key was past MaxSeries
	san       Sanitizer
}

// NewSummary returns an empty summary of at most maxSeries rows (0: the
// default).
func NewSummary(maxSeries int) *Summary {
	if maxSeries <= 0 {
		maxSeries = DefaultSummaryMaxSeries
	}
	return &Summary{MaxSeries: maxSeries, rows: map[SummaryKey]*summaryEntry{}}
}

// Add counts q (an unread record is no query: ignored).
func (s *Summary) Add(q *Query) {
	if q.Unread {
		return
	}
	k := SummaryKey{Side: q.Side, User: q.User, Client: q.Comm, Fingerprint: q.Fingerprint}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.rows[k]
	if e == nil {
		if len(s.rows) >= s.MaxSeries {
			s.dropped++
			return
		}
		e = &summaryEntry{row: SummaryRow{SummaryKey: k, Query: oneLine(string(s.san.Append(nil, q.Protocol, q.Query)))},
			lat: quantile.NewTargeted(map[float64]float64{0.5: 0.005, 0.99: 0.001})}
		s.rows[k] = e
	}
	e.row.Count++
	if q.Error != "" {
		e.row.Errors++
	}
	e.row.Rows += q.Rows
	e.row.SumUS += q.LatencyUS
	e.lat.Insert(q.LatencyUS)
}

// Rows are the summary's rows, most frequent first, and the queries left
// out because the rows were at MaxSeries.
func (s *Summary) Rows() ([]SummaryRow, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SummaryRow, 0, len(s.rows))
	for _, e := range s.rows {
		r := e.row
		r.P50US, r.P99US = e.lat.Query(0.5), e.lat.Query(0.99)
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b SummaryRow) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		if a.User != b.User {
			return compareStr(a.User, b.User)
		}
		if a.Client != b.Client {
			return compareStr(a.Client, b.Client)
		}
		return compareStr(a.Query, b.Query)
	})
	return out, s.dropped
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Write prints the summary as a table, or as JSON lines ({"summary": row})
// with format FormatJSON.
func (s *Summary) Write(w io.Writer, format string) error {
	rows, dropped := s.Rows()
	if format == FormatJSON {
		enc := json.NewEncoder(w)
		for i := range rows {
			if err := enc.Encode(struct {
				Summary *SummaryRow `json:"summary"`
			}{&rows[i]}); err != nil {
				return err
			}
		}
		if dropped > 0 {
			return enc.Encode(map[string]uint64{"summary_queries_dropped": dropped})
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SIDE\tUSER\tCLIENT\tFINGERPRINT\tCOUNT\tERRORS\tROWS\tP50_US\tP99_US\tQUERY")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%s\n", dash(r.Side), dash(r.User), dash(r.Client),
			r.Fingerprint, r.Count, r.Errors, r.Rows, r.P50US, r.P99US, r.Query)
	}
	if dropped > 0 {
		fmt.Fprintf(tw, "(%d queries past the %d rows kept are not shown)\n", dropped, s.MaxSeries)
	}
	return tw.Flush()
}

var (
	sumLabels     = []string{"side", "user", "client", "fingerprint"}
	sumQueries    = prometheus.NewDesc("cistern_capture_summary_queries_total", "Queries captured, by side, database user, client command and statement fingerprint.", sumLabels, nil)
	sumErrors     = prometheus.NewDesc("cistern_capture_summary_errors_total", "Queries answered with an error.", sumLabels, nil)
	sumRows       = prometheus.NewDesc("cistern_capture_summary_rows_total", "Rows returned or affected.", sumLabels, nil)
	sumLatency    = prometheus.NewDesc("cistern_capture_summary_latency_seconds", "Query latency, first byte of the query to last byte of its answer.", sumLabels, nil)
	sumDropped    = prometheus.NewDesc("cistern_capture_summary_dropped_total", "Queries not in the summary: their label set was past the series limit.", nil, nil)
	sumSeriesDesc = prometheus.NewDesc("cistern_capture_summary_series", "Label sets the summary holds (at most its limit).", nil, nil)
)

// Describe: the summary's fixed metric families.
func (s *Summary) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sumQueries, sumErrors, sumRows, sumLatency, sumDropped, sumSeriesDesc} {
		ch <- d
	}
}

// Collect serves each row as counters and a latency summary (p50, p99).
func (s *Summary) Collect(ch chan<- prometheus.Metric) {
	rows, dropped := s.Rows()
	for _, r := range rows {
		l := []string{r.Side, r.User, r.Client, r.Fingerprint.String()}
		ch <- prometheus.MustNewConstMetric(sumQueries, prometheus.CounterValue, float64(r.Count), l...)
		ch <- prometheus.MustNewConstMetric(sumErrors, prometheus.CounterValue, float64(r.Errors), l...)
		ch <- prometheus.MustNewConstMetric(sumRows, prometheus.CounterValue, float64(r.Rows), l...)
		ch <- prometheus.MustNewConstSummary(sumLatency, r.Count, r.SumUS/1e6,
			map[float64]float64{0.5: r.P50US / 1e6, 0.99: r.P99US / 1e6}, l...)
	}
	ch <- prometheus.MustNewConstMetric(sumDropped, prometheus.CounterValue, float64(dropped))
	ch <- prometheus.MustNewConstMetric(sumSeriesDesc, prometheus.GaugeValue, float64(len(rows)))
}
