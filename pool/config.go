// Package pool is the user-space side of the Kerby pool allocator
// (bpf/include/cistern/pool.bpf.h): it sizes the pool's maps and constants
// in any collection that includes the header, mirrors the layout, and reads
// statistics.
//
// To use the pool from your own BPF program: include "cistern/pool.bpf.h"
// (define CISTERN_POOL_OBJECTS for the generic u64-keyed objects), load the
// collection spec, call Config.Apply on it, then load it. See examples/.
package pool

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// BlockHeader is the index stored before and after each block's payload.
const BlockHeader = 8

// Config sizes a pool.
type Config struct {
	BlockSize      uint32 // bytes per block: a multiple of 8, 16..4096 (default 128)
	MaxBlocks      uint32 // blocks per object, at most the object's compile-time cap (default 8)
	CapacityBlocks uint32 // pool capacity in blocks
	MaxObjects     uint32 // entries of the generic allocation map (pool_objects), if present
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.BlockSize == 0 {
		c.BlockSize = 128
	}
	if c.MaxBlocks == 0 {
		c.MaxBlocks = 8
	}
	if c.CapacityBlocks == 0 {
		c.CapacityBlocks = 1 << 16
	}
	if c.MaxObjects == 0 {
		c.MaxObjects = c.CapacityBlocks
	}
	return c
}

// Validate explains what is wrong with c.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.BlockSize < 16 || c.BlockSize > 4096 || c.BlockSize%8 != 0 {
		return fmt.Errorf("block size %d: want a multiple of 8 from 16 to 4096", c.BlockSize)
	}
	if c.MaxBlocks < 1 || c.MaxBlocks > 64 {
		return fmt.Errorf("max blocks %d: want 1 to 64", c.MaxBlocks)
	}
	return nil
}

// MaxLen is the largest object the pool stores.
func (c Config) MaxLen() uint32 {
	c = c.WithDefaults()
	return c.BlockSize * c.MaxBlocks
}

// CompiledMaxBlocks reads CISTERN_POOL_MAX_BLOCKS of a collection from the
// size of struct pool_ref in its BTF.
func CompiledMaxBlocks(spec *ebpf.CollectionSpec) (uint32, error) {
	if spec.Types == nil {
		return 0, fmt.Errorf("collection has no BTF")
	}
	var found uint32
	for t := range spec.Types.All() {
		if t.TypeName() == "pool_ref" {
			sz, err := sizeOf(t)
			if err != nil {
				return 0, err
			}
			found = uint32((sz - RefHeaderSize) / 8)
		}
	}
	if found == 0 {
		return 0, fmt.Errorf("collection does not include cistern/pool.bpf.h (no struct pool_ref)")
	}
	return found, nil
}

// Apply sets the pool's constants and map sizes in spec (a collection that
// includes pool.bpf.h). Maps it does not contain are skipped.
func (c Config) Apply(spec *ebpf.CollectionSpec) error {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	compiled, err := CompiledMaxBlocks(spec)
	if err != nil {
		return err
	}
	if c.MaxBlocks > compiled {
		return fmt.Errorf("max blocks %d: this program was compiled for at most %d", c.MaxBlocks, compiled)
	}
	for name, v := range map[string]uint32{"pool_block_size": c.BlockSize, "pool_max_blocks": c.MaxBlocks} {
		vs, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("collection has no %s: does it include cistern/pool.bpf.h?", name)
		}
		if err := vs.Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	blockValue := c.BlockSize + 2*BlockHeader
	if m, ok := spec.Maps["pool_blocks"]; ok {
		m.MaxEntries = c.CapacityBlocks
		m.ValueSize = blockValue
	}
	if m, ok := spec.Maps["pool_zero"]; ok {
		m.ValueSize = blockValue
	}
	if m, ok := spec.Maps["pool_objects"]; ok {
		m.MaxEntries = c.MaxObjects
	}
	if m, ok := spec.Maps["pool_staging"]; ok {
		m.ValueSize = c.BlockSize * compiled
	}
	return nil
}
