// Package plot draws the charts Cistern writes as PNG files: the benches'
// figures and `cistern query --plot`. Grouped bars with their spread over
// rounds, and lines, 960x600, the legend beside the data.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	gonum "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// BarSeries is one named set of bars in a grouped bar chart: one value per
// group, e.g. ops/sec of mode "kerby" for each skew.
type BarSeries struct {
	Name   string
	Values []float64
	// Lo and Hi, when set, are each bar's spread over rounds (min and max
	// around a median Value), drawn as an error bar.
	Lo, Hi []float64
}

// Series is one named line of a line chart, e.g. a miss-ratio curve.
type Series struct {
	Name string
	X, Y []float64
}

// Chart geometry: 960×600 pixels, large enough for a README and readable
// when scaled down.
const (
	chartWidth  = 8 * vg.Inch
	chartHeight = 5 * vg.Inch
	chartDPI    = 120
	chartMargin = vg.Inch / 10
	legendGap   = vg.Inch / 5
	// lineMarkersUpTo is the most points a line may have and still get a
	// marker on each: beyond it markers only hide the line.
	lineMarkersUpTo = 40
)

// BarChart draws grouped bars to a PNG at path: for each group (x-axis
// category) one bar per series, side by side, in series order, with the
// legend to the right of the plot.
func BarChart(path, title, ylabel string, groups []string, series []BarSeries) error {
	if len(groups) == 0 || len(series) == 0 {
		return fmt.Errorf("bar chart %q: nothing to draw (%d groups, %d series)", title, len(groups), len(series))
	}
	p := newPlot(title, "", ylabel)
	p.NominalX(groups...)
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil // categories need no vertical rules
	p.Add(grid)

	leg := newLegend()
	names := make([]string, len(series))
	bars := make([]*plotter.BarChart, len(series))
	for i, s := range series {
		names[i] = s.Name
		if len(s.Values) != len(groups) {
			return fmt.Errorf("bar chart %q: series %q has %d values for %d groups", title, s.Name, len(s.Values), len(groups))
		}
		// Widths are absolute lengths, only known once the layout is: see fit.
		b, err := plotter.NewBarChart(plotter.Values(s.Values), vg.Points(1))
		if err != nil {
			return fmt.Errorf("bar chart %q: series %q: %w", title, s.Name, err)
		}
		b.Color = seriesColor(i)
		b.LineStyle.Width = 0
		p.Add(b)
		leg.Add(s.Name, b)
		bars[i] = b
		if s.Lo != nil || s.Hi != nil {
			eb, err := errorBars(s, i, len(series))
			if err != nil {
				return fmt.Errorf("bar chart %q: series %q: %w", title, s.Name, err)
			}
			p.Add(eb)
		}
	}
	// Each group owns one unit of x, so gridlines span the whole plot and
	// bars never need padding; 5% headroom keeps the tallest bar off the frame.
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	p.Y.Max += 0.05 * (p.Y.Max - p.Y.Min)
	fit := func(data draw.Canvas) {
		// The bars of a group fill 80% of its width, side by side.
		w := data.Size().X / vg.Length(len(groups)) * 0.8 / vg.Length(len(bars))
		for i, b := range bars {
			b.Width = w
			b.Offset = vg.Length(float64(i)-float64(len(bars)-1)/2) * w
		}
	}
	return render(path, p, leg, names, fit)
}

// spreadBars places min–max error bars on a series' bars: group g is one
// unit of x wide and its bars fill 80% of it (as fit lays them out).
type spreadBars struct {
	xs, ys, lo, hi []float64
}

func (e spreadBars) Len() int                    { return len(e.xs) }
func (e spreadBars) XY(i int) (float64, float64) { return e.xs[i], e.ys[i] }
func (e spreadBars) YError(i int) (float64, float64) {
	return e.ys[i] - e.lo[i], e.hi[i] - e.ys[i]
}

func errorBars(s BarSeries, i, n int) (*plotter.YErrorBars, error) {
	if len(s.Lo) != len(s.Values) || len(s.Hi) != len(s.Values) {
		return nil, fmt.Errorf("%d values but %d lows and %d highs", len(s.Values), len(s.Lo), len(s.Hi))
	}
	e := spreadBars{ys: s.Values, lo: s.Lo, hi: s.Hi}
	off := (float64(i) - float64(n-1)/2) * 0.8 / float64(n)
	for g := range s.Values {
		e.xs = append(e.xs, float64(g)+off)
	}
	eb, err := plotter.NewYErrorBars(e)
	if err != nil {
		return nil, err
	}
	eb.LineStyle.Width = vg.Points(1.2)
	eb.CapWidth = vg.Points(6)
	return eb, nil
}

// moreColors follow plotutil's palette, so that a chart of up to 14 series
// (the CBUF round trips have 10) never gives two bars one colour.
var moreColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x2f, B: 0x6f, A: 0xff}, // navy
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, // grey
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff}, // olive
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}, // cyan
	color.RGBA{R: 0x00, G: 0x00, B: 0x00, A: 0xff}, // black
	color.RGBA{R: 0xff, G: 0x00, B: 0xcc, A: 0xff}, // magenta
}

// seriesColor is series i's colour: plotutil's palette, then moreColors;
// beyond both, colours repeat (lines then differ by dashes).
func seriesColor(i int) color.Color {
	n := len(plotutil.DefaultColors)
	if i < n {
		return plotutil.Color(i)
	}
	return moreColors[(i-n)%len(moreColors)]
}

// LineChart draws one line per series to a PNG at path, with markers when
// lines have few points, and the legend to the right of the plot.
func LineChart(path, title, xlabel, ylabel string, series []Series) error {
	if len(series) == 0 {
		return fmt.Errorf("line chart %q: nothing to draw", title)
	}
	p := newPlot(title, xlabel, ylabel)
	p.Add(plotter.NewGrid())
	leg := newLegend()
	names := make([]string, len(series))
	for i, s := range series {
		names[i] = s.Name
		if len(s.X) != len(s.Y) || len(s.X) == 0 {
			return fmt.Errorf("line chart %q: series %q has %d x and %d y values", title, s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range xys {
			xys[j] = plotter.XY{X: s.X[j], Y: s.Y[j]}
		}
		line, err := plotter.NewLine(xys) // refuses NaN and ±Inf
		if err != nil {
			return fmt.Errorf("line chart %q: series %q: %w", title, s.Name, err)
		}
		line.Color = seriesColor(i)
		line.Width = vg.Points(1.5)
		// Colours repeat after a palette's worth of series; dashes then
		// keep lines apart.
		line.Dashes = plotutil.Dashes(i / (len(plotutil.DefaultColors) + len(moreColors)))
		p.Add(line)
		thumbs := []gonum.Thumbnailer{line}
		if len(xys) <= lineMarkersUpTo {
			pts, err := plotter.NewScatter(xys)
			if err != nil {
				return fmt.Errorf("line chart %q: series %q: %w", title, s.Name, err)
			}
			pts.Color = line.Color
			pts.Shape = plotutil.Shape(i)
			pts.Radius = vg.Points(2.5)
			p.Add(pts)
			thumbs = append(thumbs, pts)
		}
		leg.Add(s.Name, thumbs...)
	}
	return render(path, p, leg, names, nil)
}

func newPlot(title, xlabel, ylabel string) *gonum.Plot {
	p := gonum.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.X.Tick.Marker = readableTicks{}
	p.Y.Tick.Marker = readableTicks{}
	return p
}

func newLegend() gonum.Legend {
	leg := gonum.NewLegend()
	leg.Top, leg.Left = true, true
	leg.Padding = vg.Points(2)
	return leg
}

// legendWidth is the width a legend with these entries needs.
func legendWidth(names []string) vg.Length {
	leg := newLegend()
	for _, n := range names {
		leg.Add(n)
	}
	return leg.Rectangle(draw.Canvas{}).Size().X
}

// render draws p with leg beside it (never over the data) and writes a PNG
// to path, replacing the file only once the image is complete. fit, when not
// nil, sees the data area before drawing, to size what depends on it.
func render(path string, p *gonum.Plot, leg gonum.Legend, names []string, fit func(data draw.Canvas)) error {
	img := vgimg.NewWith(vgimg.UseWH(chartWidth, chartHeight), vgimg.UseDPI(chartDPI))
	dc := draw.Crop(draw.New(img), chartMargin, -chartMargin, chartMargin, -chartMargin)
	lw := legendWidth(names) + legendGap
	area := draw.Crop(dc, 0, -lw, 0, 0)
	if fit != nil {
		fit(p.DataCanvas(area))
	}
	p.Draw(area)
	var titleH vg.Length
	if p.Title.Text != "" {
		titleH = p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	}
	leg.Draw(draw.Crop(dc, dc.Size().X-lw+legendGap, 0, 0, -titleH))
	return writePNG(path, vgimg.PngCanvas{Canvas: img})
}

// ChartMode is the mode charts are written with: 0644 for the benches'
// figures. `cistern query --plot`, whose chart shows what kernel events
// held (process names, pids, counts), sets 0600 (cli.PrivateMode).
var ChartMode os.FileMode = 0o644

func writePNG(path string, png vgimg.PngCanvas) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), ".plot-*.png")
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if _, err = png.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	if err = errors.Join(f.Chmod(ChartMode), f.Close()); err != nil {
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	return nil
}

// readableTicks are gonum's default ticks with large values written as
// 250k, 1.5M, 2G rather than 1.5e+06, so throughput axes read at a glance.
type readableTicks struct{}

func (readableTicks) Ticks(lo, hi float64) []gonum.Tick {
	ticks := gonum.DefaultTicks{}.Ticks(lo, hi)
	var labelled []float64
	maxAbs := 0.0
	for _, t := range ticks {
		if t.Label != "" {
			labelled = append(labelled, t.Value)
			maxAbs = math.Max(maxAbs, math.Abs(t.Value))
		}
	}
	var scale float64
	var suffix string
	switch {
	case maxAbs >= 1e12:
		scale, suffix = 1e12, "T"
	case maxAbs >= 1e9:
		scale, suffix = 1e9, "G"
	case maxAbs >= 1e6:
		scale, suffix = 1e6, "M"
	case maxAbs >= 1e4:
		scale, suffix = 1e3, "k"
	default:
		return ticks
	}
	step := math.Inf(1)
	for i := 1; i < len(labelled); i++ {
		step = math.Min(step, math.Abs(labelled[i]-labelled[i-1]))
	}
	decimals := 0
	if !math.IsInf(step, 1) && step > 0 {
		decimals = min(6, max(0, int(math.Ceil(-math.Log10(step/scale)-1e-9))))
	}
	for i, t := range ticks {
		switch {
		case t.Label == "":
		case t.Value == 0:
			ticks[i].Label = "0"
		default:
			ticks[i].Label = strconv.FormatFloat(t.Value/scale, 'f', decimals, 64) + suffix
		}
	}
	return ticks
}
