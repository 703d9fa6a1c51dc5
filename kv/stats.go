package kv

import (
	"fmt"
	"maps"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/percpu"
	"github.com/cistern-ebpf/cistern/pool"
)

// StatNames are the kv_stats counters, in enum kv_stat order (cistern/kv.h).
var StatNames = []string{
	"hits", "misses", "fills", "fill_rejected", "sets", "deletes", "evictions",
	"oversize", "pool_full", "pass_malformed", "torn_retries", "read_failures",
	"multiget", "multipacket", "grow_failed", "tcp_invalidations", "tcp_flushes",
	"write_conflicts", "expired", "objects_full", "unsupported", "tc_hits",
	"events_lost", "policy_fallbacks", "pass_syntax", "pass_long", "pass_cas",
	"udp_flushes", "tcp_conns", "tcp_hits", "tcp_misses", "tcp_pass_order",
	"tcp_pass_large", "tcp_pass_split", "tcp_blind", "tcp_fills", "tcp_replies",
	"tcp_stage_lost", "tcp_pass_mixed", "tcp_pass_first",
}

// entryRefOffset is where struct kv_body (and its pool_ref) starts in a
// struct kv_entry: lock, dead, hash, birth (TestEntryLayout checks this and
// entryMaxBlocks against both objects' BTF).
const entryRefOffset = 4 + 4 + 8 + 8

// entryMaxBlocks derives the compile-time block cap from the size of a
// struct kv_entry: header, pool_ref, then seq, expire, lengths, key, suffix.
func entryMaxBlocks(valueSize uint32) int {
	fixed := entryRefOffset + pool.RefHeaderSize + 8 + 8 + 8 + 256 + 32
	return (int(valueSize) - fixed) / 8
}

// Stats is what `cistern kv stats --json` prints.
type Stats struct {
	// Counters are the kv_stats counters (StatNames) and, beside them, the
	// interface's drop counters (DriverStatNames).
	Counters map[string]uint64 `json:"counters"`
	Pool     pool.Stats        `json:"pool"`
	// KernelHitRatio = hits / (hits + misses).
	KernelHitRatio float64 `json:"kernel_hit_ratio"`
}

// maps is the subset of Kerby-KV's maps that statistics read.
type statMaps struct {
	stats, entries, index, blocks, poolStats *ebpf.Map
}

// Stats reads the live counters, the driver's drop counters and the pool
// statistics.
func (s *Server) Stats() (Stats, error) {
	st, err := readStats(statMaps{s.objs.KvStats, s.objs.KvEntries, s.objs.PoolIndex, s.objs.PoolBlocks, s.objs.PoolStats})
	if err != nil {
		return st, err
	}
	dc, err := s.DriverCounters()
	if err != nil {
		return st, err
	}
	maps.Copy(st.Counters, dc)
	return st, nil
}

// Counters reads only the per-CPU counters (cheap: for Prometheus scrapes).
func (s *Server) Counters() (map[string]uint64, error) { return readCounters(s.objs.KvStats) }

// CountersAndDriver is Counters with the driver's drop counters beside
// them (DriverStatNames), for Prometheus.
func (s *Server) CountersAndDriver() (map[string]uint64, error) {
	c, err := s.Counters()
	if err != nil {
		return nil, err
	}
	dc, err := s.DriverCounters()
	if err != nil {
		return nil, err
	}
	maps.Copy(c, dc)
	return c, nil
}

// PoolCounters reads the pool's per-CPU counters (allocations, frees, full, …).
func (s *Server) PoolCounters() (map[string]uint64, error) { return pool.Counters(s.objs.PoolStats) }

// PinnedStats reads statistics from maps pinned by `cistern kv serve`; its
// driver counters are the ones it last published (every second).
func PinnedStats(dir string) (Stats, error) {
	var m statMaps
	for name, dst := range map[string]**ebpf.Map{
		"kv_stats": &m.stats, "kv_entries": &m.entries, "pool_index": &m.index,
		"pool_blocks": &m.blocks, "pool_stats": &m.poolStats,
	} {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			return Stats{}, fmt.Errorf("no Kerby-KV running with maps in %s (%v): start 'cistern kv serve'", dir, err)
		}
		defer mp.Close()
		*dst = mp
	}
	st, err := readStats(m)
	if err != nil {
		return st, err
	}
	maps.Copy(st.Counters, pinnedDriverCounters(dir))
	return st, nil
}

func readCounters(m *ebpf.Map) (map[string]uint64, error) { return percpu.Sum(m, StatNames) }

func readStats(m statMaps) (Stats, error) {
	c, err := readCounters(m.stats)
	if err != nil {
		return Stats{}, err
	}
	refs := func(yield func(pool.Ref) bool) error {
		var key uint64
		val := make([]byte, m.entries.ValueSize())
		it := m.entries.Iterate()
		for it.Next(&key, &val) {
			r, err := pool.ParseRef(val[entryRefOffset:], entryMaxBlocks(m.entries.ValueSize()))
			if err != nil {
				return err
			}
			if !yield(r) {
				return nil
			}
		}
		return it.Err()
	}
	ps, err := pool.CollectStats(pool.Maps{Index: m.index, Blocks: m.blocks, Stats: m.poolStats}, refs)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Counters: c, Pool: ps}
	if t := c["hits"] + c["misses"]; t > 0 {
		st.KernelHitRatio = float64(c["hits"]) / float64(t)
	}
	return st, nil
}
