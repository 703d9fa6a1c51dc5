package evict

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/percpu"
	"github.com/cistern-ebpf/cistern/kernel"
)

// Constants of cistern/evict.h.
const (
	BatchSize     = 4096  // EVICT_BATCH: requests per replay run
	MaxCandidates = 32    // EVICT_MAX_CANDIDATES
	MaxLists      = 8     // EVICT_MAX_LISTS
	DefaultSlots  = 65536 // EVICT_DEFAULT_SLOTS: capacity the objects are compiled with
	ReqSize       = 24    // sizeof(struct evict_req)
	batchHeader   = 8     // n, pad
	// evictReqUnseen is EVICT_REQ_UNSEEN, in struct evict_req's flags
	// (offset 14).
	evictReqUnseen = 1
	// evictReqScan is EVICT_REQ_SCAN.
	evictReqScan = 2
	Nil          = ^uint32(0)
)

// StatNames are the evict_stats counters, in enum evict_stat order.
var StatNames = []string{
	"requests", "hits", "misses", "bytes", "hit_bytes", "inserts", "evictions",
	"evict_calls", "proposed", "invalid", "short", "fallbacks", "fallback_evictions", "no_room",
	"too_big", "events", "victims_lost",
}

// Config sizes a cache.
type Config struct {
	Policy   string // a name Lookup(Policy, Replay) accepts
	Capacity uint32 // entries (objects); 0: DefaultSlots
	// Bytes, when not 0, also bounds the sum of the entries' sizes
	// (evict_byte_capacity): the cache evicts until a new entry fits.
	Bytes uint64
	// Replace shares maps of another collection with the cache: an owner
	// such as Kerby-KV passes its queues as "evict_events" and
	// "evict_victims" (value struct evict_event, EventQueueLen entries).
	Replace map[string]*ebpf.Map
}

// EventQueueLen is EVICT_QUEUE_LEN, the size of evict_events and evict_victims.
const EventQueueLen = 16384

// Apply sets evict_capacity (.rodata) and the sizes of evict_nodes,
// evict_entries, evict_index and evict_free in spec, a collection that
// includes cistern/evict.bpf.h, and of the policy's own maps named
// evict_pslot_* (per-slot state such as S3-FIFO's ghost).
func (c Config) Apply(spec *ebpf.CollectionSpec) error {
	capacity := c.Capacity
	if capacity == 0 {
		capacity = DefaultSlots
	}
	if capacity > 1<<30 {
		return fmt.Errorf("capacity %d: at most %d entries", capacity, 1<<30)
	}
	v, ok := spec.Variables["evict_capacity"]
	if !ok {
		return errors.New("collection has no variable evict_capacity: does it include cistern/evict.bpf.h?")
	}
	if err := v.Set(capacity); err != nil {
		return fmt.Errorf("set evict_capacity: %w", err)
	}
	if b, ok := spec.Variables["evict_byte_capacity"]; ok {
		if err := b.Set(c.Bytes); err != nil {
			return fmt.Errorf("set evict_byte_capacity: %w", err)
		}
	} else if c.Bytes != 0 {
		return errors.New("collection has no variable evict_byte_capacity")
	}
	for _, name := range []string{"evict_nodes", "evict_entries", "evict_index", "evict_free"} {
		m, ok := spec.Maps[name]
		if !ok {
			return fmt.Errorf("collection has no map %s", name)
		}
		m.MaxEntries = capacity
	}
	for name, m := range spec.Maps {
		if strings.HasPrefix(name, "evict_pslot_") {
			m.MaxEntries = capacity
		}
	}
	return nil
}

// Request is one trace record (struct evict_req without the outputs).
type Request struct {
	Key  uint64
	Size uint32
	// Unseen: on a hit the policy is not told (EVICT_REQ_UNSEEN): a read
	// the page-cache agent's access sampling would not report.
	Unseen bool
	// Scan: on a miss, the entry is a scan's (EVICT_REQ_SCAN): get-scan
	// puts it on its scan list, as the page-cache agent does a folio a
	// scanning thread added (Config.ScanReadPages in package pagecache).
	Scan bool
}

// Outcome is what replay wrote back for one request.
type Outcome struct {
	Hit     bool
	Evicted uint8  // entries this request evicted
	Victim  uint64 // key of the last one (valid when Evicted > 0)
}

// Cache is one loaded policy with its cache.
type Cache struct {
	Policy   string
	Capacity uint32
	coll     *ebpf.Collection
	replay   *ebpf.Program
	periodic *ebpf.Program // the policy's evict_periodic, if its row says it has one
	drain    *ebpf.Program
	batches  *ebpf.Map
	stats    *ebpf.Map
	buf      []byte
}

// runArgs mirrors struct evict_run_args (TestRunArgsLayout checks it
// against every policy object's BTF).
type runArgs struct {
	Ret  int32
	N    uint32
	Hits uint64
}

// Open loads cfg.Policy (a registry name: Lookup) with a cache of
// cfg.Capacity entries and runs its init function.
func Open(cfg Config) (*Cache, error) {
	p, err := Lookup(cfg.Policy, Replay)
	if err != nil {
		return nil, err
	}
	spec, err := p.Spec(Replay)
	if err != nil {
		return nil, err
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultSlots
	}
	if err := cfg.Apply(spec); err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: cfg.Replace})
	if err != nil {
		return nil, kernel.LoadError("policy "+cfg.Policy, err)
	}
	periodic, err := p.PeriodicProgram(coll)
	if err != nil {
		coll.Close()
		return nil, err
	}
	c := &Cache{
		Policy: cfg.Policy, Capacity: cfg.Capacity, coll: coll,
		replay:   coll.Programs["evict_replay"],
		periodic: periodic,
		drain:    coll.Programs["evict_drain"],
		batches:  coll.Maps["evict_batches"],
		stats:    coll.Maps["evict_stats"],
		buf:      make([]byte, batchHeader+BatchSize*ReqSize),
	}
	var a runArgs
	if err := kernel.Call(coll.Programs["evict_init"], &a); err != nil {
		coll.Close()
		return nil, err
	}
	if a.Ret != 0 {
		coll.Close()
		return nil, fmt.Errorf("policy %s init failed: error %d", cfg.Policy, a.Ret)
	}
	return c, nil
}

// Close unloads the cache.
func (c *Cache) Close() error {
	c.coll.Close()
	return nil
}

// Collection is the loaded collection, for callers that read other maps.
func (c *Cache) Collection() *ebpf.Collection { return c.coll }

// Replay runs reqs through the cache in order, BatchSize per program run,
// and returns the number of hits. When out is not nil it must have
// len(reqs) entries and receives every request's outcome.
func (c *Cache) Replay(reqs []Request, out []Outcome) (hits uint64, err error) {
	if out != nil && len(out) != len(reqs) {
		return 0, fmt.Errorf("out has %d entries for %d requests", len(out), len(reqs))
	}
	le := binary.LittleEndian
	for start := 0; start < len(reqs); start += BatchSize {
		batch := reqs[start:min(start+BatchSize, len(reqs))]
		b := c.buf[:batchHeader+len(batch)*ReqSize]
		le.PutUint32(b[0:], uint32(len(batch)))
		for i, r := range batch {
			o := b[batchHeader+i*ReqSize:]
			le.PutUint64(o[0:], r.Key)
			le.PutUint32(o[8:], r.Size)
			o[14] = 0
			if r.Unseen {
				o[14] = evictReqUnseen
			}
			if r.Scan {
				o[14] |= evictReqScan
			}
		}
		// The map value is a whole struct evict_batch: records past n
		// are left over from earlier batches and never read.
		if err := c.batches.Update(uint32(0), c.buf, ebpf.UpdateAny); err != nil {
			return hits, fmt.Errorf("write batch: %w", err)
		}
		var a runArgs
		if err := kernel.Call(c.replay, &a); err != nil {
			return hits, err
		}
		if a.Ret != 0 {
			return hits, fmt.Errorf("evict_replay: error %d", a.Ret)
		}
		if int(a.N) != len(batch) {
			return hits, fmt.Errorf("evict_replay replayed %d of %d requests", a.N, len(batch))
		}
		hits += a.Hits
		if err := c.Periodic(); err != nil {
			return hits, err
		}
		if out != nil {
			if err := c.batches.Lookup(uint32(0), c.buf); err != nil {
				return hits, fmt.Errorf("read batch: %w", err)
			}
			for i := range batch {
				o := c.buf[batchHeader+i*ReqSize:]
				out[start+i] = Outcome{Hit: o[12] != 0, Evicted: o[13], Victim: le.Uint64(o[16:])}
			}
		}
	}
	return hits, nil
}

// Periodic calls the policy's program evict_periodic, if it has one:
// its work off the hot path (LHD rebuilds its density table there). Replay
// calls it after every batch; other drivers of the cache should too.
func (c *Cache) Periodic() error {
	if c.periodic == nil {
		return nil
	}
	var a runArgs
	if err := kernel.Call(c.periodic, &a); err != nil {
		return err
	}
	if a.Ret != 0 {
		return fmt.Errorf("evict_periodic: error %d", a.Ret)
	}
	return nil
}

// Drain runs evict_drain: applies the events queued on evict_events in
// order (hits, fills, removals by the owner), pushing every victim the
// policy chose for a fill onto evict_victims. Returns the events applied.
// Like Replay, it must not run concurrently with another writer.
func (c *Cache) Drain() (int, error) {
	var a runArgs
	if err := kernel.Call(c.drain, &a); err != nil {
		return 0, err
	}
	if a.Ret != 0 {
		return 0, fmt.Errorf("evict_drain: error %d", a.Ret)
	}
	return int(a.N), nil
}

// Stats reads the evict_stats counters by name (StatNames).
func (c *Cache) Stats() (map[string]uint64, error) {
	return percpu.Sum(c.stats, StatNames)
}
