package exec

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cistern-ebpf/cistern/internal/plot"
	"github.com/cistern-ebpf/cistern/query/parse"
	"github.com/cistern-ebpf/cistern/query/sema"
)

// plotMaxSeries keeps charts readable: the groups with the largest totals.
const plotMaxSeries = 12

// plotter collects one aggregate per group (and per window) for --plot.
type plotter struct {
	y      int   // item plotted
	labels []int // items naming the group
	x0     int64
	pts    map[string]*plot.Series
	total  map[string]float64
}

func hasAgg(e parse.Expr) bool {
	switch x := e.(type) {
	case *parse.Call:
		return true
	case *parse.Binary:
		return hasAgg(x.L) || hasAgg(x.R)
	case *parse.Unary:
		return hasAgg(x.X)
	}
	return false
}

// EnablePlot prepares a chart of the first numeric aggregate column, one
// line per group over windows (WINDOW) or one bar per group.
func (e *Engine) EnablePlot() error {
	if !e.q.Grouped {
		return fmt.Errorf("--plot needs an aggregate query (GROUP BY or an aggregate)")
	}
	p := &plotter{y: -1, pts: map[string]*plot.Series{}, total: map[string]float64{}}
	for i, it := range e.q.Items {
		numeric := it.Type == sema.TInt || it.Type == sema.TFloat
		if p.y < 0 && numeric && hasAgg(it.Expr) {
			p.y = i
		} else if !hasAgg(it.Expr) {
			p.labels = append(p.labels, i)
		}
	}
	if p.y < 0 {
		return fmt.Errorf("--plot needs a numeric aggregate column (COUNT, SUM, MIN, MAX, AVG, QUANTILE)")
	}
	e.plot = p
	return nil
}

func (p *plotter) add(endNs int64, vals []Value) {
	var lb []string
	for _, i := range p.labels {
		lb = append(lb, vals[i].text())
	}
	label := strings.Join(lb, " ")
	if label == "" {
		label = "all"
	}
	y := vals[p.y]
	if y.k != kInt && y.k != kFloat {
		return
	}
	s := p.pts[label]
	if s == nil {
		s = &plot.Series{Name: label}
		p.pts[label] = s
	}
	if p.x0 == 0 {
		p.x0 = endNs
	}
	s.X = append(s.X, float64(endNs-p.x0)/1e9)
	s.Y = append(s.Y, y.num())
	p.total[label] += y.num()
}

// WritePlot draws the chart to path (PNG).
func (e *Engine) WritePlot(path string) error {
	p := e.plot
	if p == nil {
		return nil
	}
	var names []string
	for n := range p.pts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return p.total[names[i]] > p.total[names[j]] })
	if len(names) > plotMaxSeries {
		names = names[:plotMaxSeries]
	}
	if len(names) == 0 {
		return fmt.Errorf("--plot: the query produced no rows to draw")
	}
	yname := e.q.Items[p.y].Name
	title := strings.Join(strings.Fields(e.q.Src), " ")
	if len(title) > 72 {
		title = title[:69] + "..."
	}
	if e.windowed {
		var ss []plot.Series
		for _, n := range names {
			ss = append(ss, *p.pts[n])
		}
		return plot.LineChart(path, title, "seconds (window end)", yname, ss)
	}
	vals := make([]float64, len(names))
	for i, n := range names {
		vals[i] = p.total[n]
	}
	return plot.BarChart(path, title, yname, names, []plot.BarSeries{{Name: yname, Values: vals}})
}
