package cbuf

import (
	"context"
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// policyState is what a policy remembers about a component between ticks.
type policyState struct {
	prevCost  int64   // blocked + collection ns, cumulative, at the last tick
	prevAlloc uint64  // client-reported allocations at the last tick
	lastFrac  float64 // blocked+collection share of the last period
	lastRate  float64 // allocations per second in the last period
	prevQuota uint64
	prevFrac  float64
	ewma      float64 // qos: smoothed blocked/GC share
}

const (
	minPoolPages = 64 // every component keeps room for one largest buffer
	qosTolerance = 0.25
	qosStep      = 16 // pages: the smallest qos step is a quarter of it
)

// A policy turns the last period's measurements into desired pool sizes.
type policy func(m *Manager, comps []*component, total uint64) map[*component]uint64

var policies = map[string]policy{
	"max-throughput": maxThroughput,
	"priority":       priority,
	"qos":            qos,
}

// policyLoop runs the policy (4 Hz by default), applies the new quotas and
// reaps orphaned buffers of departed components.
func (m *Manager) policyLoop(ctx context.Context) {
	t := time.NewTicker(m.opt.Interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.mu.Lock()
			m.tick(now.Sub(last))
			m.mu.Unlock()
			last = now
		}
	}
}

func (m *Manager) tick(dt time.Duration) {
	if m.kern != nil {
		m.reapKernel()
	}
	var comps []*component
	for _, c := range m.comps {
		if c == nil {
			continue
		}
		if !c.alive {
			m.reapOrphans(c)
			continue
		}
		cost := c.blockedNs + c.collectNs
		if !c.blockedSince.IsZero() {
			cost += int64(time.Since(c.blockedSince))
		}
		allocs := atomic.LoadUint64(&c.hdr.Allocs)
		c.pol.lastFrac = float64(cost-c.pol.prevCost) / float64(dt)
		c.pol.lastRate = float64(allocs-c.pol.prevAlloc) / dt.Seconds()
		c.pol.prevCost, c.pol.prevAlloc = cost, allocs
		comps = append(comps, c)
	}
	if len(comps) == 0 {
		return
	}
	total := m.opt.Memory / PageSize
	want := policies[m.opt.Policy](m, comps, total)
	for _, c := range comps {
		q, ok := want[c]
		if !ok {
			continue
		}
		c.pol.prevQuota, c.pol.prevFrac = c.quota, c.pol.lastFrac
		c.quota = max(q, minPoolPages)
		m.shrink(c)
	}
	m.poke() // blocked components retry under their new quotas
}

// demand is the minimise-blocking/GC-time prediction: grow a pool that
// blocks (by as much again as the blocked share asks), keep a pool that
// stopped blocking because it allocates less, undo a shrink that made
// things worse, and let an idle surplus drift back.
func demand(c *component) uint64 {
	p := &c.pol
	q := c.quota
	switch {
	case p.lastFrac > 0.01 && p.prevQuota > q:
		return p.prevQuota // a shrink hurt: back to the previous size
	case p.lastFrac > 0.01:
		return q + max(uint64(float64(q)*min(p.lastFrac*2, 1)), minPoolPages)
	case c.used+minPoolPages < q && p.lastFrac < 0.001:
		return q - (q-c.used)/4
	}
	return q
}

// fit scales desires down proportionally when they exceed the memory.
func fit(want map[*component]uint64, total uint64) map[*component]uint64 {
	var sum uint64
	for _, v := range want {
		sum += v
	}
	if sum <= total {
		return want
	}
	for c, v := range want {
		want[c] = max(minPoolPages, v*total/sum)
	}
	return want
}

func maxThroughput(_ *Manager, comps []*component, total uint64) map[*component]uint64 {
	want := map[*component]uint64{}
	for _, c := range comps {
		want[c] = demand(c)
	}
	return fit(want, total)
}

// priority satisfies higher-priority components first; the rest share
// what is left.
func priority(_ *Manager, comps []*component, total uint64) map[*component]uint64 {
	sorted := append([]*component(nil), comps...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].priority > sorted[j].priority })
	want := map[*component]uint64{}
	left := total - min(total, uint64(len(comps))*minPoolPages)
	for _, c := range sorted {
		d := demand(c)
		extra := min(d-min(d, minPoolPages), left)
		want[c] = minPoolPages + extra
		left -= extra
	}
	return want
}

// qos holds each component that has a target at that blocked/GC share by
// bounded proportional steps of its pool size; the others get
// max-throughput demands from what remains.
func qos(_ *Manager, comps []*component, total uint64) map[*component]uint64 {
	want := map[*component]uint64{}
	var used uint64
	for _, c := range comps {
		if c.qosPPM == 0 {
			continue
		}
		target := float64(c.qosPPM) / 1e6
		p := &c.pol
		// smooth the 4 Hz samples: one noisy period must not flip the search
		p.ewma = 0.5*p.ewma + 0.5*p.lastFrac
		q := c.quota
		// Proportional steps on the relative error, bounded: a pool that
		// blocks far too much grows by up to a quarter per period; one that
		// blocks too little shrinks by at most 1/16, because taking buffers
		// back makes the owner block until its in-flight ones return (a
		// bisection step near the owner's need, 12% of its pool, blocked it
		// 40% of the next period and the share swung around the target).
		if e := (p.ewma - target) / target; math.Abs(e) > qosTolerance/2 {
			f := min(max(e/8, -1.0/16), 1.0/4)
			d := max(uint64(math.Abs(f)*float64(q)), qosStep/4)
			if f > 0 {
				q += d
			} else {
				q -= min(d, q)
			}
		}
		q = max(q, minPoolPages)
		want[c] = q
		used += q
	}
	rest := map[*component]uint64{}
	for _, c := range comps {
		if c.qosPPM == 0 {
			rest[c] = demand(c)
		}
	}
	for c, v := range fit(rest, total-min(total, used)) {
		want[c] = v
	}
	return want
}
