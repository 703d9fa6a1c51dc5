package sim

import (
	"cmp"
	"container/heap"
	"slices"
)

// Two frequency references that put a policy's figure beside what
// counting can learn, between the kernel model and OPT:
//
//   - HistoryLFU is the best a counting policy can do online: it keeps the
//     exact count of every key since the trace began, evicted or not
//     (unbounded memory, which no real policy has: W-TinyLFU's sketch
//     approximates it), and evicts the resident key read least often so
//     far (ties: least recently read). A policy with frequency history
//     beyond the cache (W-TinyLFU) is measured against it.
//   - OracleLFU knows every key's count over the whole trace in advance and
//     evicts the resident key with the lowest. On a long trace of
//     independent draws from a fixed distribution it tends to A0 (below);
//     on a finite one the realised counts also tell which keys this
//     trace's future draws favour, so it can pass every online policy
//     (YCSB's uniform run: 1.37× OPT, where every online policy expects
//     the same misses, 1.82×). On a workload whose popularity moves (a
//     trace of phases), it is not a bound either.
//
// And the bound itself, where the workload's distribution is known:
//
//   - A0MissRatio is the expected miss ratio of A0 on independent draws
//     from given probabilities: no online policy expects fewer misses on
//     such a trace (Aho, Denning and Ullman, 1971). OPT's lead over it is
//     what knowing the order of the draws adds. Under independent draws a
//     page's count is all the past tells about it, so HistoryLFU is what
//     an online policy learns toward A0 from the trace it has seen.

// HistoryLFU returns the misses of keys[from:] under online LFU with
// every key's count kept since keys[0], at capacity keys.
func HistoryLFU(keys []uint64, capacity, from int) uint64 {
	counts := make(map[uint64]uint32)
	return lfuMisses(keys, capacity, from, func(_ int, k uint64) uint32 {
		counts[k]++
		return counts[k]
	})
}

// OracleLFU returns the misses of keys[from:] under LFU ranked by each
// key's count over all of keys, known in advance, at capacity keys.
func OracleLFU(keys []uint64, capacity, from int) uint64 {
	counts := make(map[uint64]uint32)
	for _, k := range keys {
		counts[k]++
	}
	return lfuMisses(keys, capacity, from, func(_ int, k uint64) uint32 { return counts[k] })
}

// A0MissRatio returns A0's expected miss ratio at capacity pages on
// independent draws from probs (one weight per page, any order, any
// scale): A0 keeps the capacity-1 most probable pages and lets the last
// slot hold whichever other page was read last, which in steady state is
// page j with probability p_j / T (T: the mass outside the kept pages).
// Compulsory misses are not counted (the steady state).
func A0MissRatio(probs []float64, capacity int) float64 {
	p := slices.Clone(probs)
	slices.SortFunc(p, func(a, b float64) int { return cmp.Compare(b, a) })
	var total float64
	for _, v := range p {
		total += v
	}
	if total <= 0 || capacity >= len(p) {
		return 0
	}
	if capacity <= 0 {
		return 1
	}
	var kept, tail, tailSq float64
	for i, v := range p {
		if i < capacity-1 {
			kept += v
		} else {
			tail += v
			tailSq += v * v
		}
	}
	hit := kept
	if tail > 0 {
		hit += tailSq / tail
	}
	return 1 - hit/total
}

// lfuMisses runs a cache that evicts the resident key of the lowest rank
// (count, then last access); count(i, k) is k's count at access i, called
// once at each access (OPT ranks by next use the same way).
func lfuMisses(keys []uint64, capacity, from int, count func(i int, k uint64) uint32) uint64 {
	if capacity <= 0 {
		return uint64(len(keys) - min(from, len(keys)))
	}
	resident := make(map[uint64]rank, min(capacity, len(keys)))
	h := &rankHeap{}
	var misses uint64
	for i, k := range keys {
		r := rank{count: count(i, k), last: i}
		if _, ok := resident[k]; !ok {
			if i >= from {
				misses++
			}
			if len(resident) >= capacity {
				for {
					top := heap.Pop(h).(ranked)
					if cur, ok := resident[top.key]; ok && cur == top.rank {
						delete(resident, top.key)
						break
					}
				}
			}
		}
		resident[k] = r
		heap.Push(h, ranked{r, k}) // an older entry of k is stale now
		if h.Len() > 4*capacity+1024 {
			kept := (*h)[:0]
			for _, e := range *h {
				if resident[e.key] == e.rank {
					kept = append(kept, e)
				}
			}
			*h = kept
			heap.Init(h)
		}
	}
	return misses
}

type rank struct {
	count uint32
	last  int
}

type ranked struct {
	rank
	key uint64
}

type rankHeap []ranked

func (h rankHeap) Len() int { return len(h) }
func (h rankHeap) Less(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count < h[j].count
	}
	return h[i].last < h[j].last
}
func (h rankHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *rankHeap) Push(x any)   { *h = append(*h, x.(ranked)) }
func (h *rankHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
