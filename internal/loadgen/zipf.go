package loadgen

import (
	"fmt"
	"math"
)

// Zipfian maps uniform numbers in [0, 1) to ranks 0..n-1 (rank 0 is the most
// popular) with P(rank r) proportional to 1/(r+1)^θ.
//
// For θ < 1 it is YCSB's ZipfianGenerator, the constant-time method of Gray
// et al. ("Quickly generating billion-record synthetic databases", SIGMOD
// 1994): ranks 0 and 1 are exact and the others follow a closed-form
// approximation of the inverse CDF. That method breaks down as θ reaches 1
// (math/rand's Zipf, for its part, needs θ > 1), so for θ >= 1 Rank searches
// an exact cumulative table instead (8 bytes per rank). θ = 0 is uniform.
//
// A Zipfian is immutable and safe for concurrent use; the randomness comes
// from the caller, so sampling is as deterministic as the caller's source.
type Zipfian struct {
	n     int
	theta float64
	zetan float64
	// YCSB's constants.
	alpha, eta, half float64
	// cdf[i] = P(rank <= i), used when theta >= 1.
	cdf []float64
}

// Zeta returns the generalized harmonic number zeta(n, θ) = Σ_{i=1..n} 1/i^θ.
func Zeta(n int, theta float64) float64 {
	var s float64
	// Smallest terms first, for precision.
	for i := n; i >= 1; i-- {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

// NewZipfian returns the zipfian distribution over n ranks with skew θ >= 0.
// Construction costs O(n) (computing zeta(n, θ)).
func NewZipfian(n int, theta float64) (*Zipfian, error) {
	if n < 1 {
		return nil, fmt.Errorf("loadgen: zipfian over %d items", n)
	}
	if !(theta >= 0) || math.IsInf(theta, 0) {
		return nil, fmt.Errorf("loadgen: zipfian skew %v, want a finite θ >= 0", theta)
	}
	z := &Zipfian{n: n, theta: theta, zetan: Zeta(n, theta)}
	if theta >= 1 {
		z.cdf = make([]float64, n)
		var acc float64
		for i := range n {
			acc += 1 / math.Pow(float64(i+1), theta)
			z.cdf[i] = acc / z.zetan
		}
		z.cdf[n-1] = 1
		return z, nil
	}
	z.alpha = 1 / (1 - theta)
	z.half = math.Pow(0.5, theta)
	if n > 2 { // for n <= 2 Rank never reaches the formula
		zeta2 := 1 + z.half
		z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/z.zetan)
	}
	return z, nil
}

// N is the number of ranks.
func (z *Zipfian) N() int { return z.n }

// Theta is the skew.
func (z *Zipfian) Theta() float64 { return z.theta }

// ZetaN is zeta(n, θ), the normalisation constant: rank 0 has probability
// 1/ZetaN.
func (z *Zipfian) ZetaN() float64 { return z.zetan }

// Prob is the theoretical probability of rank r (0-based).
func (z *Zipfian) Prob(r int) float64 {
	if r < 0 || r >= z.n {
		return 0
	}
	return 1 / math.Pow(float64(r+1), z.theta) / z.zetan
}

// Rank maps u in [0, 1) to a rank in [0, n).
func (z *Zipfian) Rank(u float64) int {
	if z.cdf != nil {
		// Smallest i with cdf[i] > u.
		lo, hi := 0, z.n-1
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if z.cdf[m] > u {
				hi = m
			} else {
				lo = m + 1
			}
		}
		return lo
	}
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < 1+z.half {
		return 1
	}
	r := int(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return max(0, min(r, z.n-1))
}
