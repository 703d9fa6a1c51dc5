package exporter

import (
	"strings"

	"github.com/cistern-ebpf/cistern/internal/metrics"
	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/sema"
)

// Kinds of value columns.
type kind int

const (
	kLabel     kind = iota // a group key
	kCounter               // COUNT, SUM (cumulative)
	kGauge                 // last window's value
	kHistogram             // HIST
	kQuantile              // QUANTILE: a gauge with a quantile label
)

// column is how one output column of a query maps to Prometheus.
type column struct {
	key      string // its key in the query's JSON rows
	kind     kind
	name     string // label name, or full metric name
	help     string
	quantile string // kQuantile: the q argument as written
}

// unitSuffix names the unit of an aggregate's argument: Prometheus names
// carry their unit.
func unitSuffix(c *parse.Call) string {
	if len(c.Args) == 0 {
		return ""
	}
	col, ok := c.Args[0].(*parse.Col)
	if !ok {
		return ""
	}
	n := strings.ToLower(col.Name)
	switch {
	case strings.HasSuffix(n, "_ns"):
		return "nanoseconds"
	case strings.HasSuffix(n, "bytes"), n == "size", n == "len":
		return "bytes"
	}
	return ""
}

// columns maps q's output columns; name is the query's name. A query must be
// grouped (aggregates or GROUP BY): a window of raw rows is no metric.
func columns(name string, q *sema.Query, cumulative bool) ([]column, error) {
	if !q.Grouped {
		return nil, configErrorf("query %s: the exporter needs aggregates (COUNT, SUM, HIST, ...) with GROUP BY: raw rows are not metrics", name)
	}
	prefix := "cistern_query_" + name + "_"
	var cols []column
	seen := map[string]bool{}
	for _, it := range q.Items {
		c := column{key: it.Name}
		call, isCall := it.Expr.(*parse.Call)
		base := metrics.SanitizeName(strings.ToLower(it.Name))
		switch {
		case !isCall && !hasCall(it.Expr):
			c.kind, c.name = kLabel, base
			if c.name == "quantile" || c.name == "le" || c.name == "query" || strings.HasPrefix(c.name, "__") {
				c.name = "key_" + c.name // reserved by Prometheus or by us
			}
		case !isCall:
			c.kind = kGauge
		case call.Name == "COUNT" || call.Name == "SUM":
			c.kind = kGauge
			if cumulative {
				c.kind = kCounter
			}
		case call.Name == "HIST":
			c.kind = kHistogram
		case call.Name == "QUANTILE":
			c.kind = kQuantile
			if len(call.Args) == 2 {
				ps, pe := call.Args[1].Span()
				if s, e := int(ps), int(pe); s >= 0 && e <= len(q.Src) && s < e {
					c.quantile = strings.TrimSpace(q.Src[s:e])
				}
			}
		default:
			c.kind = kGauge
		}
		if c.kind != kLabel {
			u := ""
			if isCall {
				u = unitSuffix(call)
			}
			c.name = prefix + base
			if u != "" && !strings.HasSuffix(base, u) {
				c.name += "_" + u
			}
			if c.kind == kCounter {
				c.name += "_total"
			}
			c.help = "cistern query " + name + ": " + it.Name
		}
		if seen[c.name] {
			return nil, configErrorf("query %s: two columns map to %s: give them distinct aliases", name, c.name)
		}
		seen[c.name] = true
		cols = append(cols, c)
	}
	return cols, nil
}

// hasCall says whether e contains an aggregate.
func hasCall(e parse.Expr) bool {
	switch x := e.(type) {
	case *parse.Call:
		return true
	case *parse.Binary:
		return hasCall(x.L) || hasCall(x.R)
	case *parse.Unary:
		return hasCall(x.X)
	}
	return false
}
