package sim

import "math/rand/v2"

// ZipfKeys draws n page keys from a universe of pages with P(rank k) ∝
// 1/(k+1)^s (s > 1: math/rand/v2's Zipf), scrambled as YCSB does so that
// hot pages spread over the key space. The headroom issue's synthetic
// trace is ZipfKeys(n, 262144, 1.1, seed) against a 60,000-page cache.
func ZipfKeys(n int, universe uint64, s float64, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, seed+1))
	z := rand.NewZipf(r, s, 1, universe-1)
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = z.Uint64() * 0x9E3779B97F4A7C15
	}
	return keys
}
