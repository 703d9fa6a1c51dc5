package loadgen

import (
	"math/bits"
	"time"
)

// histogram is a log-linear latency histogram in the spirit of HDR
// histograms: values below 2^subBits ns get a bucket each, and every power
// of two above is cut into 2^subBits sub-buckets, so a recorded value is
// known to within 1/2^subBits (1.6%) at any magnitude, in a fixed 30 KiB and
// with no allocation per sample.
type histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum, max uint64
}

const (
	subBits     = 6
	subCount    = 1 << subBits
	histBuckets = (64 - subBits + 1) * subCount
)

func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return (shift+1)*subCount + int(v>>uint(shift)) - subCount
}

// bucketMid is the middle of the values that land in bucket i.
func bucketMid(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := i/subCount - 1
	lo := uint64(i%subCount+subCount) << uint(shift)
	return lo + (uint64(1)<<uint(shift))/2
}

func (h *histogram) record(ns int64) {
	v := uint64(max(ns, 0))
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

func (h *histogram) reset() { *h = histogram{} }

// quantile returns the value below which a fraction q of the samples lie.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	target := uint64(q * float64(h.n))
	if float64(target) < q*float64(h.n) {
		target++ // ceil
	}
	target = max(target, 1)
	var acc uint64
	for i, c := range h.counts {
		acc += c
		if acc >= target {
			return time.Duration(min(bucketMid(i), h.max))
		}
	}
	return time.Duration(h.max)
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}
