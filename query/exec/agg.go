package exec

import (
	"math"
	"math/bits"
	"sort"

	"github.com/cistern-ebpf/cistern/query/parse"
)

// maxSamples bounds QUANTILE's memory per group: past it, a reservoir
// sample keeps the estimate unbiased (QUANTILE is then approximate).
const maxSamples = 1 << 16

// acc accumulates one aggregate of one group.
type acc struct {
	count, sum int64
	min, max   int64
	hist       *[64]uint64
	samples    []int64
	seen       int64
	distinct   map[string]struct{}
}

func log2Bucket(v int64) int {
	if v <= 0 {
		return 0
	}
	return bits.Len64(uint64(v)) & 63
}

func (a *acc) add(c *parse.Call, v Value, rnd *uint64) {
	if c.Distinct {
		if a.distinct == nil {
			a.distinct = map[string]struct{}{}
		}
		a.distinct[v.text()] = struct{}{}
		return
	}
	if c.Star {
		a.count++
		return
	}
	if v.k == kNull {
		return
	}
	x := v.i
	if v.k == kFloat {
		x = int64(v.f)
	}
	if a.count == 0 || x < a.min {
		a.min = x
	}
	if a.count == 0 || x > a.max {
		a.max = x
	}
	a.count++
	a.sum += x
	switch c.Name {
	case "HIST":
		if a.hist == nil {
			a.hist = new([64]uint64)
		}
		a.hist[log2Bucket(x)]++
	case "QUANTILE":
		a.seen++
		if len(a.samples) < maxSamples {
			a.samples = append(a.samples, x)
		} else {
			*rnd = *rnd*6364136223846793005 + 1442695040888963407
			if j := int64(*rnd>>1) % a.seen; j < maxSamples {
				a.samples[j] = x
			}
		}
	}
}

// merge folds a kernel partial (count, sum, min, max, histogram) in.
func (a *acc) merge(count, sum, min, max int64, hist *[64]uint64) {
	if count == 0 {
		return
	}
	if a.count == 0 || min < a.min {
		a.min = min
	}
	if a.count == 0 || max > a.max {
		a.max = max
	}
	a.count += count
	a.sum += sum
	if hist != nil {
		if a.hist == nil {
			a.hist = new([64]uint64)
		}
		for i, n := range hist {
			a.hist[i] += n
		}
	}
}

func (a *acc) result(c *parse.Call) Value {
	switch c.Name {
	case "COUNT":
		if c.Distinct {
			return intV(int64(len(a.distinct)))
		}
		return intV(a.count)
	case "SUM":
		return intV(a.sum)
	case "MIN":
		if a.count == 0 {
			return Value{}
		}
		return intV(a.min)
	case "MAX":
		if a.count == 0 {
			return Value{}
		}
		return intV(a.max)
	case "AVG":
		if a.count == 0 {
			return Value{}
		}
		return floatV(float64(a.sum) / float64(a.count))
	case "HIST":
		h := a.hist
		if h == nil {
			h = new([64]uint64)
		}
		return Value{k: kHist, h: h}
	case "QUANTILE":
		if len(a.samples) == 0 {
			return Value{}
		}
		q := c.Args[1].(*parse.FloatLit).V
		s := append([]int64(nil), a.samples...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		idx := int(math.Ceil(q*float64(len(s)))) - 1
		if idx < 0 {
			idx = 0
		}
		return floatV(float64(s[idx]))
	}
	return Value{}
}
