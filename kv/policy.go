package kv

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/thread"
	"github.com/cistern-ebpf/cistern/kernel"
)

// DefaultDrainInterval is how often the drainer applies queued events.
const DefaultDrainInterval = time.Millisecond

// policyState is Kerby-KV's eviction policy (--policy): an evict cache that
// shares kv_events and kv_victims and is written only by the drainer.
type policyState struct {
	cache *evict.Cache
	mu    sync.Mutex // one drainer at a time: the cache is single-writer
	stop  chan struct{}
	done  chan struct{}
}

// policyBudget is what the policy may fill, given the pool of b blocks:
// the capacity in blocks and objects minus a reserve (1/16, at least one
// largest value) left free so that fills arriving between two drains find
// room without the fallback.
func policyBudget(b, maxObjects, maxBlocks uint32) (blocks, objects uint32) {
	rb := max(b/16, maxBlocks)
	ro := max(maxObjects/16, 1)
	if rb >= b || ro >= maxObjects {
		return 0, 0
	}
	return b - rb, maxObjects - ro
}

// PolicyBudget is the block and object budget Config.Policy gets (the
// pool minus its reserve).
func PolicyBudget(cfg Config) (blocks uint64, objects uint32) {
	pc := cfg.PoolConfig()
	b, o := policyBudget(pc.CapacityBlocks, pc.MaxObjects, pc.MaxBlocks)
	return uint64(b), o
}

func (s *Server) openPolicy(name string, blocks, objects uint32) error {
	if blocks == 0 || objects == 0 {
		return fmt.Errorf("--policy %s: the pool is too small for a reserve", name)
	}
	c, err := evict.Open(evict.Config{
		Policy: name, Capacity: objects, Bytes: uint64(blocks),
		Replace: map[string]*ebpf.Map{"evict_events": s.objs.KvEvents, "evict_victims": s.objs.KvVictims},
	})
	if err != nil {
		return err
	}
	s.policy = &policyState{cache: c}
	return nil
}

// Drain applies the hits, fills and removals the data path queued to the
// policy and deletes the victims it chose, then runs the policy's periodic
// work. Returns the events applied and the entries evicted. Without
// --policy it does nothing.
func (s *Server) Drain() (events, evicted int, err error) {
	p := s.policy
	if p == nil {
		return 0, 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if events, err = p.cache.Drain(); err != nil {
		return 0, 0, err
	}
	ret, err := kernel.CallRet(s.objs.KvReap)
	if err != nil {
		return events, 0, err
	}
	return events, int(ret), p.cache.Periodic()
}

// StartDrainer runs Drain every interval until Close. errf gets errors.
func (s *Server) StartDrainer(interval time.Duration, errf func(error)) {
	p := s.policy
	if p == nil || p.stop != nil {
		return
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		// Fills use the reserve until the next drain: the drainer must not
		// wait behind the load generator or the server for its CPU.
		defer thread.Urgent()()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				// Drain until the queue is empty, so a burst is applied
				// at once rather than one queue-full per tick.
				for {
					n, _, err := s.Drain()
					if err != nil && errf != nil {
						errf(err)
					}
					if err != nil || n < evict.EventQueueLen {
						break
					}
				}
			}
		}
	}()
}

// PolicyCounters reads the policy cache's counters (evict.StatNames); nil
// without --policy.
func (s *Server) PolicyCounters() (map[string]uint64, error) {
	if s.policy == nil {
		return nil, nil
	}
	return s.policy.cache.Stats()
}

func (p *policyState) close() {
	if p.stop != nil {
		close(p.stop)
		<-p.done
	}
	p.cache.Close()
}
