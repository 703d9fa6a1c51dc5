package sim

// never is the next use of a key that is not accessed again.
const never = int(^uint(0) >> 1)

// OPT returns the misses of Belady's optimal policy over keys[from:] (the
// accesses before from warm the cache) with room for capacity keys: on a miss with the cache full it evicts the key whose next
// use is furthest away. Every miss loads its key (a page cache cannot
// serve a read without the page), so this is the demand-paging optimum.
func OPT(keys []uint64, capacity, from int) uint64 {
	next := nextUses(keys)
	// The lowest rank goes first (lfuMisses): a key never used again
	// ranks 0, the others the nearer their next use the higher.
	return lfuMisses(keys, capacity, from, func(i int, _ uint64) uint32 {
		return uint32(len(keys) - min(next[i], len(keys)))
	})
}

// nextUses returns, for each position, the position of the same key's next
// access (never if none).
func nextUses(keys []uint64) []int {
	next := make([]int, len(keys))
	last := make(map[uint64]int, 1024)
	for i := len(keys) - 1; i >= 0; i-- {
		if j, ok := last[keys[i]]; ok {
			next[i] = j
		} else {
			next[i] = never
		}
		last[keys[i]] = i
	}
	return next
}
