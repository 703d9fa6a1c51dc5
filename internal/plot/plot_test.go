package plot

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"
)

// readPNG checks the file is a complete PNG of the chart size and decodes it.
func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s does not start with the PNG signature", path)
	}
	if len(data) < 10_000 {
		t.Errorf("%s is only %d bytes: is anything drawn?", path, len(data))
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 960 || b.Dy() != 600 {
		t.Errorf("image is %dx%d, want 960x600", b.Dx(), b.Dy())
	}
	return img
}

// colourColumns returns, for a series colour, how many pixels have it and
// the smallest and largest x where it appears.
func colourColumns(img image.Image, c color.Color) (n, minX, maxX int) {
	r0, g0, b0, _ := c.RGBA()
	b := img.Bounds()
	minX = math.MaxInt
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == r0>>8 && g>>8 == g0>>8 && bl>>8 == b0>>8 {
				n++
				minX, maxX = min(minX, x), max(maxX, x)
			}
		}
	}
	return n, minX, maxX
}

func TestBarChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bars.png")
	err := BarChart(path, "GET throughput", "ops/sec", []string{"skew 0.9", "skew 0.99"}, []BarSeries{
		{Name: "kerby", Values: []float64{2.4e6, 3.1e6}},
		{Name: "memcached", Values: []float64{8e5, 9e5}},
		{Name: "fixed slots", Values: []float64{1.9e6, 2.2e6}},
	})
	if err != nil {
		t.Fatal(err)
	}
	img := readPNG(t, path)
	for i := range 3 {
		n, minX, maxX := colourColumns(img, plotutil.Color(i))
		// Each series has two bars plus a legend swatch: many pixels,
		// spread across the plot and reaching the legend at the right.
		if n < 2000 {
			t.Errorf("series %d: only %d pixels of its colour", i, n)
		}
		if maxX < 800 || maxX-minX < 300 {
			t.Errorf("series %d spans x %d..%d: want bars in both groups and a legend entry on the right", i, minX, maxX)
		}
	}
}

func TestLineChart(t *testing.T) {
	x := make([]float64, 200)
	lru, fifo := make([]float64, 200), make([]float64, 200)
	for i := range x {
		x[i] = float64(i+1) * 1000
		lru[i] = 1 / math.Sqrt(float64(i+1))
		fifo[i] = 1.1 / math.Sqrt(float64(i+1))
	}
	path := filepath.Join(t.TempDir(), "lines.png")
	err := LineChart(path, "Miss ratio", "cache size (objects)", "miss ratio", []Series{
		{"LRU", x, lru},
		{"FIFO", x, fifo},
		{"one point", []float64{5e4}, []float64{0.5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	img := readPNG(t, path)
	for i := range 3 {
		if n, _, maxX := colourColumns(img, plotutil.Color(i)); n < 20 || maxX < 800 {
			t.Errorf("series %d: %d pixels, rightmost at x=%d: want a line and a legend entry", i, n, maxX)
		}
	}
}

func TestChartErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.png")
	for name, err := range map[string]error{
		"no groups":    BarChart(path, "t", "y", nil, []BarSeries{{Name: "a", Values: nil}}),
		"no series":    BarChart(path, "t", "y", []string{"g"}, nil),
		"short series": BarChart(path, "t", "y", []string{"g1", "g2"}, []BarSeries{{Name: "a", Values: []float64{1}}}),
		"NaN bar":      BarChart(path, "t", "y", []string{"g"}, []BarSeries{{Name: "a", Values: []float64{math.NaN()}}}),
		"no lines":     LineChart(path, "t", "x", "y", nil),
		"x/y mismatch": LineChart(path, "t", "x", "y", []Series{{"a", []float64{1, 2}, []float64{1}}}),
		"empty line":   LineChart(path, "t", "x", "y", []Series{{"a", nil, nil}}),
		"Inf point":    LineChart(path, "t", "x", "y", []Series{{"a", []float64{1}, []float64{math.Inf(1)}}}),
		"missing dir":  LineChart(filepath.Join(dir, "no", "such.png"), "t", "x", "y", []Series{{"a", []float64{1}, []float64{1}}}),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed charts left files behind: %v", entries)
	}
}

func TestReadableTicks(t *testing.T) {
	labels := func(lo, hi float64) string {
		var ls []string
		for _, tk := range (readableTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				ls = append(ls, tk.Label)
			}
		}
		return strings.Join(ls, " ")
	}
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 3.1e7, "0 10M 20M 30M"},
		{0, 2.5e6, "0 1M 2M"},
		{1.2e6, 1.6e6, "1.2M 1.4M 1.6M"},
		{0, 60000, "0 30k 60k"},
		{0, 1, "0.0 0.5 1.0"}, // small values keep gonum's labels
	} {
		if got := labels(tc.lo, tc.hi); got != tc.want {
			t.Errorf("ticks(%g, %g) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}

func TestBarChartSpread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bars.png")
	err := BarChart(path, "t", "y", []string{"g1", "g2"}, []BarSeries{
		{Name: "a", Values: []float64{2, 3}, Lo: []float64{1, 2}, Hi: []float64{3, 4}},
		{Name: "b", Values: []float64{1, 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(path); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("no PNG written: %v", err)
	}
	if err := BarChart(path, "t", "y", []string{"g1"}, []BarSeries{{Name: "a", Values: []float64{2}, Lo: []float64{1, 2}, Hi: []float64{3}}}); err == nil {
		t.Error("mismatched spread: no error")
	}
}
