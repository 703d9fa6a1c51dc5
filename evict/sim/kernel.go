package sim

// KernelModel is a model of the kernel's default page cache for one memory
// cgroup without MGLRU (mm/vmscan.c, mm/swap.c, mm/workingset.c): file
// pages on an inactive and an active list, the second access of an
// inactive page activating it (folio_mark_accessed), reclaim from the
// inactive tail, the active list deactivated into the inactive one while
// it is the larger (inactive_is_low, with its ratio sqrt(10 × GiB) from
// 1 GiB up), and refault detection: a page read again within the active
// list's size of evictions and activations (the non-resident age) since
// its own eviction goes straight to the active list (workingset_refault).
//
// What it leaves out: reclaim in batches of 32 and at watermarks below the
// limit (the model holds exactly capacity pages); other charges of the
// cgroup (anonymous memory, the workload's own allocations), which the
// caller accounts for through capacity; mapped pages and their PTE
// references; readahead (every miss loads one page); large folios; the
// per-CPU LRU batches that delay activation; shadow entries lost when
// their nodes are reclaimed; a read within the folio of the previous read
// of the same open file not marking it accessed again.
type KernelModel struct {
	capacity int
	nodes    []knode
	index    map[uint64]int32 // key -> node
	free     []int32
	lists    [2]klist // inactive, active
	shadow   map[uint64]uint64
	age      uint64 // non-resident age: evictions + activations
	Misses   uint64
	Refaults uint64 // misses of recently evicted pages, activated at once
}

const (
	inactive = 0
	active   = 1
)

type knode struct {
	key        uint64
	prev, next int32
	list       uint8
	referenced bool
}

type klist struct {
	head, tail int32 // head: newest
	n          int
}

// NewKernelModel returns the model with room for capacity pages.
func NewKernelModel(capacity int) *KernelModel {
	m := &KernelModel{capacity: max(capacity, 1), index: map[uint64]int32{}, shadow: map[uint64]uint64{}}
	for i := range m.lists {
		m.lists[i] = klist{head: -1, tail: -1}
	}
	return m
}

// Access is a buffered read of the page key; it reports a hit.
func (m *KernelModel) Access(key uint64) bool {
	if i, ok := m.index[key]; ok {
		m.markAccessed(i)
		return true
	}
	m.Misses++
	list := uint8(inactive)
	if ev, ok := m.shadow[key]; ok {
		delete(m.shadow, key)
		if m.age-ev <= uint64(m.lists[active].n) {
			list = active
			m.Refaults++
			m.age++ // workingset_activation ages the non-resident clock
		}
	}
	for m.lists[inactive].n+m.lists[active].n >= m.capacity {
		m.reclaimOne()
	}
	i := m.alloc(key)
	m.push(list, i)
	m.markAccessed(i) // the read that loaded it
	return false
}

// markAccessed is folio_mark_accessed: referenced first, activated at the
// second access while inactive.
func (m *KernelModel) markAccessed(i int32) {
	n := &m.nodes[i]
	switch {
	case !n.referenced:
		n.referenced = true
	case n.list == inactive:
		m.unlink(i)
		n.referenced = false
		m.push(active, i)
		m.age++
	}
}

// reclaimOne balances the lists, then evicts the inactive tail (an
// unmapped file page is reclaimed whether referenced or not).
func (m *KernelModel) reclaimOne() {
	for m.inactiveLow() {
		t := m.lists[active].tail
		m.unlink(t)
		m.push(inactive, t) // deactivated with PG_referenced kept
	}
	t := m.lists[inactive].tail
	if t < 0 {
		t = m.lists[active].tail
	}
	k := m.nodes[t].key
	m.unlink(t)
	delete(m.index, k)
	m.free = append(m.free, t)
	m.shadow[k] = m.age
	m.age++
	if len(m.shadow) > 4*m.capacity+1024 {
		m.trimShadows()
	}
}

// trimShadows forgets the shadow entries too old to refault: a refault
// distance is at most the active list, so at most capacity. Exact, and
// it keeps a model that runs without end (auto's) in bounded memory.
func (m *KernelModel) trimShadows() {
	for k, ev := range m.shadow {
		if m.age-ev > uint64(m.capacity) {
			delete(m.shadow, k)
		}
	}
}

func (m *KernelModel) inactiveLow() bool {
	in, ac := m.lists[inactive].n, m.lists[active].n
	if ac == 0 {
		return false
	}
	ratio := 1
	if gb := (in + ac) >> (30 - 12); gb > 0 {
		ratio = isqrt(10 * gb)
	}
	return in*ratio < ac
}

func isqrt(x int) int {
	r := 0
	for (r+1)*(r+1) <= x {
		r++
	}
	return r
}

func (m *KernelModel) alloc(key uint64) int32 {
	var i int32
	if n := len(m.free); n > 0 {
		i = m.free[n-1]
		m.free = m.free[:n-1]
	} else {
		i = int32(len(m.nodes))
		m.nodes = append(m.nodes, knode{})
	}
	m.nodes[i] = knode{key: key, prev: -1, next: -1}
	m.index[key] = i
	return i
}

func (m *KernelModel) push(list uint8, i int32) {
	l := &m.lists[list]
	n := &m.nodes[i]
	n.list, n.prev, n.next = list, -1, l.head
	if l.head >= 0 {
		m.nodes[l.head].prev = i
	} else {
		l.tail = i
	}
	l.head = i
	l.n++
}

func (m *KernelModel) unlink(i int32) {
	n := &m.nodes[i]
	l := &m.lists[n.list]
	if n.prev >= 0 {
		m.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		m.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = -1, -1
	l.n--
}

// Kernel returns the model's misses over keys[from:] (the accesses before
// from warm it) with room for capacity pages.
func Kernel(keys []uint64, capacity, from int) uint64 {
	m := NewKernelModel(capacity)
	from = min(from, len(keys))
	for _, k := range keys[:from] {
		m.Access(k)
	}
	m.Misses = 0
	for _, k := range keys[from:] {
		m.Access(k)
	}
	return m.Misses
}

// LRU returns the misses of a plain LRU over keys[from:] (a reference for tests:
// the kernel's model must do no worse than LRU on a loop and OPT no worse
// than either).
func LRU(keys []uint64, capacity, from int) uint64 {
	m := NewKernelModel(capacity)
	var misses uint64
	for i, k := range keys {
		if i, ok := m.index[k]; ok {
			m.unlink(i)
			m.push(inactive, i)
			continue
		}
		if i >= from {
			misses++
		}
		if m.lists[inactive].n >= m.capacity {
			t := m.lists[inactive].tail
			delete(m.index, m.nodes[t].key)
			m.unlink(t)
			m.free = append(m.free, t)
		}
		m.push(inactive, m.alloc(k))
	}
	return misses
}
