package pool

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// StatNames are the pool_stats counters in enum pool_stat order (pool.h).
var StatNames = []string{
	"blocks_allocated", "blocks_freed", "pool_full", "objects_full", "oversize",
	"rollbacks", "torn_retries", "read_failures", "lost_races",
}

// Maps are the pool's own maps in a loaded collection.
type Maps struct {
	Index, Blocks, Stats *ebpf.Map
}

// Stats describes a pool's memory and counters.
type Stats struct {
	Objects          uint64 `json:"objects"`
	LiveBlocks       uint64 `json:"live_blocks"`
	ReferencedBlocks uint64 `json:"referenced_blocks"`
	PayloadBytes     uint64 `json:"payload_bytes"`
	// LeakedBlocks = live - referenced: blocks no published object points to.
	// Transiently non-zero while writers work; 0 when idle.
	LeakedBlocks uint64 `json:"leaked_blocks"`
	// MemoryEfficiency = payload bytes / (live blocks × block size).
	MemoryEfficiency float64           `json:"memory_efficiency"`
	BlockSize        uint32            `json:"block_size"`
	CapacityBlocks   uint32            `json:"capacity_blocks"`
	IndicesIssued    uint64            `json:"indices_issued"`
	Versions         uint64            `json:"versions"`
	Counters         map[string]uint64 `json:"counters"`
}

// CollectStats walks the pool and the objects refs yields (one Ref per
// published object; empty refs count as no object).
func CollectStats(m Maps, refs func(yield func(Ref) bool) error) (Stats, error) {
	var st Stats
	st.BlockSize = m.Blocks.ValueSize() - 2*BlockHeader
	st.CapacityBlocks = m.Blocks.MaxEntries()
	var err error
	if st.Counters, err = Counters(m.Stats); err != nil {
		return st, err
	}
	for i, dst := range []*uint64{&st.IndicesIssued, &st.Versions} {
		if err := m.Index.Lookup(uint32(i), dst); err != nil {
			return st, fmt.Errorf("read pool_index: %w", err)
		}
	}
	if err := refs(func(r Ref) bool {
		if r.Ver != 0 {
			st.Objects++
			st.ReferencedBlocks += uint64(r.NBlocks)
			st.PayloadBytes += uint64(r.Len)
		}
		return true
	}); err != nil {
		return st, err
	}
	if st.LiveBlocks, err = countKeys(m.Blocks); err != nil {
		return st, err
	}
	if st.LiveBlocks > st.ReferencedBlocks {
		st.LeakedBlocks = st.LiveBlocks - st.ReferencedBlocks
	}
	if st.LiveBlocks > 0 {
		st.MemoryEfficiency = float64(st.PayloadBytes) / float64(st.LiveBlocks*uint64(st.BlockSize))
	}
	return st, nil
}

// countKeys counts a hash map's entries with batched key lookups.
func countKeys(m *ebpf.Map) (uint64, error) {
	keys := make([]uint64, 4096)
	var cursor ebpf.MapBatchCursor
	var total uint64
	for {
		n, err := m.BatchLookup(&cursor, keys, nil, nil)
		total += uint64(n)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if err != nil {
			// Batch ops unsupported: fall back to iteration.
			var k uint64
			var count uint64
			it := m.Iterate()
			var v []byte
			for it.Next(&k, &v) {
				count++
			}
			return count, it.Err()
		}
	}
}

// Counters sums the per-CPU pool_stats.
func Counters(m *ebpf.Map) (map[string]uint64, error) {
	out := make(map[string]uint64, len(StatNames))
	var per []uint64
	for i, name := range StatNames {
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read pool_stats: %w", err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[name] = sum
	}
	return out, nil
}
