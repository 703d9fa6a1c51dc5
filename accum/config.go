package accum

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// Limits and defaults of Config (cistern/accum.h, accum.bpf.h).
const (
	MinFlushSize       = 64
	MaxFlushSize       = 16384
	DefaultFlushSize   = 1024
	DefaultLatency     = 10 * time.Millisecond
	DefaultWakeupBytes = 64 << 10
	DefaultRingSize    = 1 << 20
	DefaultMaxConns    = 4096
	// ConnHeader is sizeof(struct accum_conn) without its buffer: an
	// accum_conns value is ConnHeader + 2 × FlushSize.
	ConnHeader = 96
)

// Config sizes and tunes the channel. Zero fields take defaults.
type Config struct {
	FlushSize   uint32        // batch bytes before a flush: a power of two, 64..16384 (default 1024)
	Latency     time.Duration // longest a byte waits in a batch (default 10 ms)
	WakeupBytes uint64        // ring bytes written between forced reader wakeups (default 64 KiB)
	RingSize    uint32        // ring buffer bytes: a power of two multiple of the page size (default 1 MiB)
	MaxConns    uint32        // connections accumulated at once (default 4096)
}

// WithDefaults fills the unset fields.
func (c Config) WithDefaults() Config {
	if c.FlushSize == 0 {
		c.FlushSize = DefaultFlushSize
	}
	if c.Latency == 0 {
		c.Latency = DefaultLatency
	}
	if c.WakeupBytes == 0 {
		c.WakeupBytes = DefaultWakeupBytes
	}
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	return c
}

// Validate explains what is wrong with c (after defaults).
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.FlushSize < MinFlushSize || c.FlushSize > MaxFlushSize || c.FlushSize&(c.FlushSize-1) != 0 {
		return fmt.Errorf("accum flush size %d: want a power of two from %d to %d", c.FlushSize, MinFlushSize, MaxFlushSize)
	}
	if c.Latency < 100*time.Microsecond {
		return fmt.Errorf("accum latency bound %v: want at least 100µs", c.Latency)
	}
	if c.RingSize < 4096 || c.RingSize&(c.RingSize-1) != 0 {
		return fmt.Errorf("accum ring size %d: want a power of two of at least 4096", c.RingSize)
	}
	return nil
}

// Apply sets the channel's constants (.rodata accum_flush_size,
// accum_latency_ns, accum_wakeup_bytes) and map sizes in spec, a collection
// that includes cistern/accum.bpf.h, before it is loaded.
func (c Config) Apply(spec *ebpf.CollectionSpec) error {
	if err := c.Validate(); err != nil {
		return err
	}
	c = c.WithDefaults()
	for name, v := range map[string]any{
		"accum_flush_size":   c.FlushSize,
		"accum_latency_ns":   uint64(c.Latency.Nanoseconds()),
		"accum_wakeup_bytes": c.WakeupBytes,
	} {
		sv, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("collection has no variable %s: does it include cistern/accum.bpf.h?", name)
		}
		if err := sv.Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	value := ConnHeader + 2*c.FlushSize
	for _, name := range []string{"accum_conns", "accum_zero", "accum_ring"} {
		if _, ok := spec.Maps[name]; !ok {
			return fmt.Errorf("collection has no map %s: does it include cistern/accum.bpf.h?", name)
		}
	}
	spec.Maps["accum_conns"].ValueSize = value
	spec.Maps["accum_conns"].MaxEntries = c.MaxConns
	spec.Maps["accum_zero"].ValueSize = value
	spec.Maps["accum_ring"].MaxEntries = c.RingSize
	return nil
}

// Start arms the latency-bound timer of a loaded collection (runs its
// accum_start program once).
func Start(coll *ebpf.Collection) error {
	p, ok := coll.Programs["accum_start"]
	if !ok {
		return fmt.Errorf("collection has no program accum_start: does it include cistern/accum.bpf.h?")
	}
	return runStart(p)
}
