// Package exporter serves `cistern query` results as Prometheus metrics:
// named queries run continuously, each closing a window every WINDOW, and
// every GROUP BY row of the last window becomes a series.
//
//   - group keys are labels (names sanitised to [a-zA-Z0-9_]);
//   - COUNT and SUM are counters (`_total`) added up over windows when the
//     query is cumulative (the default), gauges of the last window if not;
//   - HIST is a Prometheus histogram (`_bucket{le}`, `_sum`, `_count`), its
//     log2 buckets added up over windows like counters;
//   - QUANTILE is a gauge with a `quantile` label; MIN, MAX, AVG and other
//     expressions are gauges: the value of the last window the group was in
//     (a scrape between windows still sees it; max_series bounds them);
//   - value names carry their unit: a column ending in `_ns` gives
//     `_nanoseconds`, bytes-like columns (`bytes`, `size`, `len`, `ret`)
//     nothing added when the alias already says it.
//
// A query keeps at most MaxSeries label sets: rows past the bound are dropped
// and counted in cistern_exporter_series_dropped_total, never held. The
// mapping is in mapping.go, the state per query in series.go; docs/query.md
// has a worked example.
package exporter
