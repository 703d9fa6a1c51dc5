package pool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/percpu"
	"golang.org/x/sys/unix"
)

// StatNames are the pool_stats counters in enum pool_stat order (pool.h).
var StatNames = []string{
	"blocks_allocated", "blocks_freed", "pool_full", "objects_full", "oversize",
	"rollbacks", "torn_retries", "read_failures", "lost_races", "scratch_busy", "free_misses", "slots_lost",
}

// Maps are the pool's own maps in a loaded collection.
type Maps struct {
	Index  *ebpf.Map // pool_index
	Blocks *ebpf.Map // pool_blocks
	Stats  *ebpf.Map // pool_stats
}

// Stats describes a pool's memory and counters.
type Stats struct {
	Objects          uint64 `json:"objects"`           // published objects (Ver != 0)
	LiveBlocks       uint64 `json:"live_blocks"`       // stamped slots of pool_blocks
	ReferencedBlocks uint64 `json:"referenced_blocks"` // blocks the published objects point to
	PayloadBytes     uint64 `json:"payload_bytes"`     // sum of the objects' lengths
	// LeakedBlocks = LiveBlocks - ReferencedBlocks: blocks no published
	// object points to. Writers in flight hold some; 0 when idle.
	LeakedBlocks uint64 `json:"leaked_blocks"`
	// MemoryEfficiency = PayloadBytes / (LiveBlocks × BlockSize); 0 when empty.
	MemoryEfficiency float64 `json:"memory_efficiency"`
	BlockSize        uint32  `json:"block_size"`
	CapacityBlocks   uint32  `json:"capacity_blocks"`
	// From pool_index: block indices ever handed out and versions ever
	// created (both only grow).
	IndicesIssued uint64 `json:"indices_issued"`
	Versions      uint64 `json:"versions"`
	// Counters are pool_stats summed over CPUs, by StatNames.
	Counters map[string]uint64 `json:"counters"`
}

// CollectStats reads the pool's counters, counts its live blocks and adds up
// the objects refs yields: one Ref per entry of the caller's allocation map
// (refs with Ver 0 are not objects). The maps may change meanwhile; the
// numbers are exact when the pool is idle.
func CollectStats(m Maps, refs func(yield func(Ref) bool) error) (Stats, error) {
	var st Stats
	if m.Index == nil || m.Blocks == nil || m.Stats == nil {
		return st, errors.New("pool stats: Maps needs Index, Blocks and Stats")
	}
	st.BlockSize = m.Blocks.ValueSize() - 2*BlockHeader
	st.CapacityBlocks = m.Blocks.MaxEntries()
	var err error
	if st.Counters, err = Counters(m.Stats); err != nil {
		return st, err
	}
	if st.IndicesIssued, st.Versions, err = IndexCounters(m.Index); err != nil {
		return st, err
	}
	if refs != nil {
		if err := refs(func(r Ref) bool {
			if r.Ver != 0 {
				st.Objects++
				st.ReferencedBlocks += uint64(r.NBlocks)
				st.PayloadBytes += uint64(r.Len)
			}
			return true
		}); err != nil {
			return st, fmt.Errorf("pool stats: walk objects: %w", err)
		}
	}
	if st.LiveBlocks, err = CountLiveBlocks(m.Blocks); err != nil {
		return st, fmt.Errorf("pool stats: count blocks: %w", err)
	}
	if st.LiveBlocks > st.ReferencedBlocks {
		st.LeakedBlocks = st.LiveBlocks - st.ReferencedBlocks
	}
	if st.LiveBlocks > 0 && st.BlockSize > 0 {
		st.MemoryEfficiency = float64(st.PayloadBytes) / float64(st.LiveBlocks*uint64(st.BlockSize))
	}
	return st, nil
}

// IndexCounters reads pool_index: the last block index and the last version
// number handed out.
func IndexCounters(index *ebpf.Map) (blocks, versions uint64, err error) {
	if err := index.Lookup(uint32(0), &blocks); err != nil {
		return 0, 0, fmt.Errorf("read pool_index: %w", err)
	}
	if err := index.Lookup(uint32(1), &versions); err != nil {
		return 0, 0, fmt.Errorf("read pool_index: %w", err)
	}
	return blocks, versions, nil
}

// Counters sums the per-CPU pool_stats by StatNames.
func Counters(m *ebpf.Map) (map[string]uint64, error) { return percpu.Sum(m, StatNames) }

// CountEntries counts the entries of a hash map with batched lookups (a few
// MiB per system call), falling back to key iteration where batches are not
// supported.
func CountEntries(m *ebpf.Map) (uint64, error) {
	var n uint64
	err := ForEach(m, func(_, _ []byte) bool { n++; return true })
	return n, err
}

// CountLiveBlocks counts the blocks of pool_blocks in use: slots whose
// header holds a block index (a free slot's is 0).
func CountLiveBlocks(blocks *ebpf.Map) (uint64, error) {
	var n uint64
	err := ForEach(blocks, func(_, v []byte) bool {
		if len(v) >= BlockHeader && binary.NativeEndian.Uint64(v) != 0 {
			n++
		}
		return true
	})
	return n, err
}

// batchBytes is the size of the buffers of one batched lookup.
const batchBytes = 4 << 20

// ForEach calls fn with the raw key and value of every entry of a hash or
// array map (not per-CPU), in batches, until fn returns false. The slices are
// reused: copy what you keep. Entries added or removed meanwhile may or may
// not be seen.
func ForEach(m *ebpf.Map, fn func(key, value []byte) bool) error {
	ks, vs := int(m.KeySize()), int(m.ValueSize())
	n := min(max(batchBytes/(ks+vs), 64), int(max(m.MaxEntries(), 64)))
	keysAny, keys := rawSlice(n, ks)
	valsAny, vals := rawSlice(n, vs)
	var cursor ebpf.MapBatchCursor
	for {
		got, err := m.BatchLookup(&cursor, keysAny, valsAny, nil)
		for i := 0; i < got; i++ {
			if !fn(keys[i*ks:(i+1)*ks], vals[i*vs:(i+1)*vs]) {
				return nil
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, ebpf.ErrKeyNotExist), errors.Is(err, unix.ENOENT):
			return nil // done
		case errors.Is(err, unix.ENOSPC) && got == 0:
			// A hash bucket holds more entries than the batch: grow it and
			// retry from the same cursor.
			n *= 2
			keysAny, keys = rawSlice(n, ks)
			valsAny, vals = rawSlice(n, vs)
		case errors.Is(err, ebpf.ErrNotSupported):
			return forEachIter(m, fn)
		default:
			return err
		}
	}
}

func forEachIter(m *ebpf.Map, fn func(key, value []byte) bool) error {
	key := make([]byte, m.KeySize())
	val := make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(&key, &val) {
		if !fn(key, val) {
			return nil
		}
	}
	return it.Err()
}

// rawSlice makes a []([size]byte) of n elements: cilium/ebpf wants one
// element per key or value in batch calls, and copies a slice of byte
// arrays without marshalling. It also returns the slice's bytes.
func rawSlice(n, size int) (any, []byte) {
	s := reflect.MakeSlice(reflect.SliceOf(reflect.ArrayOf(size, reflect.TypeFor[byte]())), n, n)
	return s.Interface(), unsafe.Slice((*byte)(s.UnsafePointer()), n*size)
}
