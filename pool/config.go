package pool

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// BlockHeader is the block index stored before and after each block's
// payload (POOL_BLOCK_HDR): a pool_blocks value is BlockSize + 2*BlockHeader.
const BlockHeader = 8

// Limits of Config (pool.bpf.h).
const (
	MinBlockSize     = 16
	MaxBlockSize     = 4096
	MaxBlocksLimit   = 64 // largest CISTERN_POOL_MAX_BLOCKS a program may be compiled with
	DefaultBlockSize = 128
	DefaultMaxBlocks = 8
	// DefaultCapacityBlocks is the pool capacity when Config leaves it 0.
	DefaultCapacityBlocks = 1 << 16
)

// Config sizes a pool. Zero fields take defaults (see WithDefaults).
type Config struct {
	BlockSize      uint32 // bytes per block: a multiple of 8, 16..4096 (default 128)
	MaxBlocks      uint32 // blocks per object, at most the program's CISTERN_POOL_MAX_BLOCKS (default 8)
	CapacityBlocks uint32 // pool capacity in blocks (default 65536)
	MaxObjects     uint32 // entries of the generic allocation map pool_objects, if any (default CapacityBlocks)
}

// WithDefaults fills the unset fields.
func (c Config) WithDefaults() Config {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.MaxBlocks == 0 {
		c.MaxBlocks = DefaultMaxBlocks
	}
	if c.CapacityBlocks == 0 {
		c.CapacityBlocks = DefaultCapacityBlocks
	}
	if c.MaxObjects == 0 {
		c.MaxObjects = c.CapacityBlocks
	}
	return c
}

// Validate explains what is wrong with c (after defaults).
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.BlockSize < MinBlockSize || c.BlockSize > MaxBlockSize || c.BlockSize%8 != 0 {
		return fmt.Errorf("pool block size %d: want a multiple of 8 from %d to %d", c.BlockSize, MinBlockSize, MaxBlockSize)
	}
	if c.MaxBlocks > MaxBlocksLimit {
		return fmt.Errorf("pool max blocks %d: want 1 to %d blocks per object", c.MaxBlocks, MaxBlocksLimit)
	}
	return nil
}

// MaxLen is the largest object the pool stores: BlockSize × MaxBlocks.
func (c Config) MaxLen() uint32 {
	c = c.WithDefaults()
	return c.BlockSize * c.MaxBlocks
}

// CompiledMaxBlocks reads the CISTERN_POOL_MAX_BLOCKS a collection was
// compiled with from the size of struct pool_ref in its BTF.
func CompiledMaxBlocks(spec *ebpf.CollectionSpec) (uint32, error) {
	if spec.Types == nil {
		return 0, errors.New("collection has no BTF: build it with -g")
	}
	var ref *btf.Struct
	if err := spec.Types.TypeByName("pool_ref", &ref); err != nil {
		return 0, fmt.Errorf("collection does not include cistern/pool.bpf.h (no struct pool_ref): %w", err)
	}
	n := (int(ref.Size) - RefHeaderSize) / 8
	if n < 1 || n > MaxBlocksLimit || RefSize(n) != int(ref.Size) {
		return 0, fmt.Errorf("struct pool_ref is %d bytes: not a layout this package knows", ref.Size)
	}
	return uint32(n), nil
}

// Apply sets the pool's constants (.rodata pool_block_size and
// pool_max_blocks) and map sizes in spec, a collection that includes
// cistern/pool.bpf.h, before it is loaded:
//
//	pool_blocks    MaxEntries = CapacityBlocks, ValueSize = BlockSize+16
//	pool_slots     MaxEntries = CapacityBlocks (.rodata pool_capacity too)
//	pool_zero      ValueSize = BlockSize+16
//	pool_objects   MaxEntries = MaxObjects
//	pool_staging*  ValueSize = BlockSize × CISTERN_POOL_MAX_BLOCKS (every map
//	               whose name starts with pool_staging: buffers for objects)
//
// Maps the collection does not have are skipped, so it serves Kerby-KV as
// well as the generic objects. An unset MaxBlocks becomes 8, or the
// compile-time cap if that is lower.
func (c Config) Apply(spec *ebpf.CollectionSpec) error {
	compiled, err := CompiledMaxBlocks(spec)
	if err != nil {
		return err
	}
	if c.MaxBlocks == 0 {
		c.MaxBlocks = min(DefaultMaxBlocks, compiled)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	if c.MaxBlocks > compiled {
		return fmt.Errorf("pool max blocks %d: this BPF object was compiled with CISTERN_POOL_MAX_BLOCKS %d", c.MaxBlocks, compiled)
	}
	for _, name := range []string{"pool_block_size", "pool_max_blocks", "pool_capacity"} {
		if _, ok := spec.Variables[name]; !ok {
			return fmt.Errorf("collection has no variable %s: does it include cistern/pool.bpf.h?", name)
		}
	}
	if err := spec.Variables["pool_block_size"].Set(c.BlockSize); err != nil {
		return fmt.Errorf("set pool_block_size: %w", err)
	}
	if err := spec.Variables["pool_max_blocks"].Set(c.MaxBlocks); err != nil {
		return fmt.Errorf("set pool_max_blocks: %w", err)
	}
	if err := spec.Variables["pool_capacity"].Set(c.CapacityBlocks); err != nil {
		return fmt.Errorf("set pool_capacity: %w", err)
	}
	blockValue := c.BlockSize + 2*BlockHeader
	if m, ok := spec.Maps["pool_blocks"]; ok {
		m.MaxEntries = c.CapacityBlocks
		m.ValueSize = blockValue
	}
	if m, ok := spec.Maps["pool_slots"]; ok {
		m.MaxEntries = c.CapacityBlocks
	}
	if m, ok := spec.Maps["pool_zero"]; ok {
		m.ValueSize = blockValue
	}
	if m, ok := spec.Maps["pool_objects"]; ok {
		m.MaxEntries = c.MaxObjects
	}
	for name, m := range spec.Maps {
		if strings.HasPrefix(name, "pool_staging") {
			m.ValueSize = c.BlockSize * compiled
		}
	}
	return nil
}
