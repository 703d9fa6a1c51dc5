package sim

import "container/heap"

// never is the next use of a key that is not accessed again.
const never = int(^uint(0) >> 1)

// OPT returns the misses of Belady's optimal policy over keys[from:] (the
// accesses before from warm the cache) with room for capacity keys: on a miss with the cache full it evicts the key whose next
// use is furthest away. Every miss loads its key (a page cache cannot
// serve a read without the page), so this is the demand-paging optimum.
func OPT(keys []uint64, capacity, from int) uint64 {
	if capacity <= 0 {
		return uint64(len(keys) - min(from, len(keys)))
	}
	next := nextUses(keys)
	resident := make(map[uint64]int, min(capacity, len(keys))) // key -> its next use
	h := &useHeap{}
	var misses uint64
	for i, k := range keys {
		nu := next[i]
		if _, ok := resident[k]; ok {
			resident[k] = nu
			heap.Push(h, use{nu, k}) // the older entry is stale now
			continue
		}
		if i >= from {
			misses++
		}
		if len(resident) >= capacity {
			for {
				top := heap.Pop(h).(use)
				if cur, ok := resident[top.key]; ok && cur == top.next {
					delete(resident, top.key)
					break
				}
			}
		}
		resident[k] = nu
		heap.Push(h, use{nu, k})
		if h.Len() > 4*capacity+1024 { // drop stale entries now and then
			h.compact(resident)
		}
	}
	return misses
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

type use struct {
	next int
	key  uint64
}

// useHeap is a max-heap on next use.
type useHeap []use

func (h useHeap) Len() int           { return len(h) }
func (h useHeap) Less(i, j int) bool { return h[i].next > h[j].next }
func (h useHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *useHeap) Push(x any)        { *h = append(*h, x.(use)) }
func (h *useHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h *useHeap) compact(resident map[uint64]int) {
	live := (*h)[:0]
	for _, u := range *h {
		if cur, ok := resident[u.key]; ok && cur == u.next {
			live = append(live, u)
		}
	}
	*h = live
	heap.Init(h)
}
