package sim

import "container/heap"

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
//     evicts the resident key with the lowest. On an independent-reference
//     workload (each access drawn from a fixed distribution: fio's zipf,
//     YCSB's request distribution) this is A0, the best any online policy
//     can do in expectation knowing the distribution exactly (Aho, Denning
//     and Ullman, 1971); OPT's lead over it is what knowing the order of
//     the draws adds, which no online policy can know. On a workload whose
//     popularity moves (a trace of phases), it is not a bound.

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
