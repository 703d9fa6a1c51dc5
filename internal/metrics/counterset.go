package metrics

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counterSet is a collector whose counters are whatever read returns at
// scrape time.
type counterSet struct {
	namespace, subsystem string
	read                 func() (map[string]uint64, error)
	errors               atomic.Uint64
	errDesc              *prometheus.Desc
}

// NewCounterSet returns a collector that calls read on every scrape and
// exposes each entry as the counter namespace_subsystem_<name>_total. Names
// are sanitized to Prometheus' alphabet ("rx-drops" becomes rx_drops_total;
// a trailing "_total" is not doubled), and entries whose names sanitize
// alike are added together, so a scrape never fails on a name. When read
// fails the scrape carries no counters from it and
// namespace_subsystem_scrape_errors_total goes up; that counter is always
// exposed, so a dashboard can alert on it.
//
// read is meant to sum per-CPU BPF map counters; it must be safe to call
// concurrently, as scrapes may overlap.
func NewCounterSet(namespace, subsystem string, read func() (map[string]uint64, error)) prometheus.Collector {
	ns, sub := SanitizeName(namespace), SanitizeName(subsystem)
	return &counterSet{
		namespace: ns,
		subsystem: sub,
		read:      read,
		errDesc: prometheus.NewDesc(prometheus.BuildFQName(ns, sub, "scrape_errors_total"),
			"Times reading these counters failed during a scrape.", nil, nil),
	}
}

// Describe sends nothing: the counter names are known only once read runs,
// which makes this an unchecked collector. Name clashes with other
// collectors are then caught at scrape time rather than at registration.
func (c *counterSet) Describe(chan<- *prometheus.Desc) {}

// Collect reads the counters and sends them, sorted by name.
func (c *counterSet) Collect(ch chan<- prometheus.Metric) {
	vals, err := c.read()
	if err != nil {
		c.errors.Add(1)
	}
	sums := make(map[string]float64, len(vals))
	origin := make(map[string][]string, len(vals))
	for name, v := range vals {
		s := strings.TrimSuffix(SanitizeName(name), "_total")
		if s == "" || s == "_" {
			continue // an unnamed counter cannot become a metric
		}
		sums[s] += float64(v)
		origin[s] = append(origin[s], name)
	}
	for _, name := range slices.Sorted(maps.Keys(sums)) {
		slices.Sort(origin[name])
		desc := prometheus.NewDesc(prometheus.BuildFQName(c.namespace, c.subsystem, name+"_total"),
			fmt.Sprintf("Cistern counter %s.", strings.Join(origin[name], " + ")), nil, nil)
		m, err := prometheus.NewConstMetric(desc, prometheus.CounterValue, sums[name])
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err) // reported by the scrape, never a panic in a daemon
		}
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(c.errDesc, prometheus.CounterValue, float64(c.errors.Load()))
}

// SanitizeName maps s onto [a-zA-Z0-9_] (the colon is reserved for recording
// rules), so "rx-drops" and "rx.drops" become rx_drops, and prefixes a
// leading digit with an underscore.
func SanitizeName(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
