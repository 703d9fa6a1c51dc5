package pagecachebench

import "math"

// fioZipfProbs returns the probability of each of n blocks under fio's
// random_distribution=zipf:theta: the rank drawn by the approximation of
// Gray et al. that fio implements (lib/zipf.c: rank 1 below 1/zeta(n),
// rank 2 below zeta(2)/zeta(n), else 1 + floor(n·(η·u − η + 1)^α) for a
// uniform u, with zeta(n) summed over at most 10^7 terms), each rank on a
// block of its own (fio hashes it onto the file). The masses come from
// inverting that map, not from drawing: A0 (sim.A0MissRatio) over them is
// the fewest misses any online policy can expect on the zipf part.
// TestFioZipfProbsMatchFio checks them against fio's own draws.
func fioZipfProbs(n int, theta float64) []float64 {
	var zetan float64
	for i := 1; i <= min(n, 10_000_000); i++ {
		zetan += math.Pow(1/float64(i), theta)
	}
	zeta2 := 1 + math.Pow(0.5, theta)
	alpha := 1 / (1 - theta)
	eta := (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/zetan)
	p := make([]float64, n)
	p[0] += 1 / zetan
	p[1%n] += (zeta2 - 1) / zetan
	// The u that maps to x = n·(η·u − η + 1)^α; rank k takes x in [k−1, k).
	uOf := func(x float64) float64 { return (math.Pow(x/float64(n), 1/alpha) - 1 + eta) / eta }
	from := zeta2 / zetan
	prev := uOf(0)
	for k := 1; k <= n+1; k++ {
		next := uOf(float64(k))
		lo, hi := max(min(prev, next), from), min(max(prev, next), 1)
		if hi > lo {
			p[(k-1)%n] += hi - lo
		}
		prev = next
	}
	return p
}
