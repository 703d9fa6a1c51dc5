package cbuf

import (
	"encoding/json"
	"sync/atomic"
	"time"
)

// ComponentStats is one component as the manager sees it.
type ComponentStats struct {
	Slot         uint32  `json:"slot"`
	Name         string  `json:"name"`
	Pid          int32   `json:"pid"`
	UID          uint32  `json:"uid"`
	GID          uint32  `json:"gid"`
	Exporting    bool    `json:"exporting"`
	GrantsOut    int     `json:"grants_out"`  // live grants of its buffers to other uids
	GrantsIn     int     `json:"grants_in"`   // buffers of other uids granted to it
	RefusedMap   uint64  `json:"refused_map"` // MAP of a pool it has no right to (or none)
	RefusedIDs   uint64  `json:"refused_ids"` // forged, stale or never-given ids
	Alive        bool    `json:"alive"`
	Priority     int     `json:"priority"`
	QosTargetPct float64 `json:"qos_target_pct"`
	PoolPages    uint64  `json:"pool_pages"`
	UsedPages    uint64  `json:"used_pages"`
	Buffers      int     `json:"buffers"`
	FreeBuffers  int     `json:"free_buffers"`
	// CachedBuffers: in the C client's thread caches (referenced by the
	// component itself, so in use to liveness and not in FreeBuffers).
	CachedBuffers int     `json:"cached_buffers"`
	BlockedMs     float64 `json:"blocked_ms"`
	CollectMs     float64 `json:"collect_ms"`
	BlockedPct    float64 `json:"blocked_gc_pct_last_period"`
	AllocsPerSec  float64 `json:"allocs_per_sec_last_period"`
	Blocks        uint64  `json:"blocks"`
	Collections   uint64  `json:"collections"`
	Collected     uint64  `json:"collected"`
	Created       uint64  `json:"created"`
	Reclaimed     uint64  `json:"reclaimed"`
	Allocs        uint64  `json:"allocs"`
	Frees         uint64  `json:"frees"`
	Sends         uint64  `json:"sends"`
	Recvs         uint64  `json:"recvs"`
}

// Stats is the manager's state for `cistern cbuf stats`.
type Stats struct {
	Policy      string           `json:"policy"`
	MemoryPages uint64           `json:"memory_pages"`
	QuotaPages  uint64           `json:"quota_pages"`
	UsedPages   uint64           `json:"used_pages"`
	Orphans     int              `json:"orphan_buffers"`
	Drops       uint64           `json:"malformed_requests"`
	RefusedConn uint64           `json:"refused_connections"` // not in the allow-lists
	RefusedMap  uint64           `json:"refused_map"`         // all components, gone ones included
	RefusedIDs  uint64           `json:"refused_ids"`
	Grants      int              `json:"grants"`
	UptimeSec   float64          `json:"uptime_sec"`
	Components  []ComponentStats `json:"components"`
	Kernel      *KernelStats     `json:"kernel,omitempty"`
}

// KernelStats describes the kernel component.
type KernelStats struct {
	Pages    uint32 `json:"pages"`
	Out      int    `json:"pages_out"`
	Handed   uint64 `json:"handed"`
	Returned uint64 `json:"returned"`
	Drops    uint64 `json:"drops_no_free_page"`
}

// Stats snapshots the manager.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{Policy: m.opt.Policy, MemoryPages: m.opt.Memory / PageSize, Drops: m.drops.Load(), UptimeSec: time.Since(m.start).Seconds(),
		RefusedConn: m.refusedConns.Load(), RefusedMap: m.refusedMap.Load(), RefusedIDs: m.refusedIDs.Load()}
	out := map[uint32]int{}
	for g, ps := range m.grants {
		out[uint32(g/uint64(m.maxBufs))] += len(ps)
		s.Grants += len(ps)
	}
	for _, c := range m.comps {
		if c == nil {
			continue
		}
		cs := ComponentStats{Slot: c.slot, Name: c.name, Pid: c.pid, Alive: c.alive, Priority: c.priority,
			QosTargetPct: float64(c.qosPPM) / 1e4, PoolPages: c.quota, UsedPages: c.used, Buffers: len(c.owned),
			BlockedMs: float64(c.blockedNs) / 1e6, CollectMs: float64(c.collectNs) / 1e6,
			BlockedPct: c.pol.lastFrac * 100, AllocsPerSec: c.pol.lastRate, Blocks: c.blocks,
			Collections: c.collections, Collected: c.collected, Created: c.created, Reclaimed: c.reclaimed,
			UID: c.uid, GID: c.gid, Exporting: c.exporting, GrantsOut: out[c.slot], GrantsIn: len(c.held),
			RefusedMap: c.refusedMap, RefusedIDs: c.refusedIDs}
		s.UsedPages += c.used
		if c.alive {
			s.QuotaPages += c.quota
			h := c.hdr
			cs.Allocs, cs.Frees = atomic.LoadUint64(&h.Allocs), atomic.LoadUint64(&h.Frees)
			cs.Sends, cs.Recvs = atomic.LoadUint64(&h.Sends), atomic.LoadUint64(&h.Recvs)
			for _, idx := range c.owned {
				g := m.g(c.slot, idx)
				if c.bufs[idx].state != bufClient {
					continue
				}
				switch w, nx := atomic.LoadUint64(&c.metas[g].Cnt), atomic.LoadUint32(&c.metas[g].Next); {
				case w == 0 && nx != 0:
					cs.FreeBuffers++
				case w == ref1 && nx == nextCached:
					cs.CachedBuffers++
				}
			}
		} else {
			s.Orphans += len(c.owned)
		}
		s.Components = append(s.Components, cs)
	}
	if k := m.kern; k != nil {
		s.Kernel = &KernelStats{Pages: k.src.Pages(), Out: len(k.out), Handed: k.handed, Returned: k.returned, Drops: k.src.Drops()}
	}
	return s
}

func jsonBytes(v any) ([]byte, error) { return json.Marshal(v) }
