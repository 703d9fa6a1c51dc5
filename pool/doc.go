// Package pool is the user-space side of Kerby, the memory pool allocator for
// BPF programs in bpf/include/cistern/pool.bpf.h.
//
// # What the pool is
//
// BPF maps have fixed-size values, so a program that keeps variable-length
// data in the kernel must either waste memory on large slots or give up on
// long values. Kerby stores each object as a chain of fixed-size blocks
// (BlockSize bytes, at most MaxBlocks of them) in one array, pool_blocks,
// and records the chain in an allocation map (object id -> struct pool_ref).
// A block index is a generation from a counter that only grows and the
// block's slot; freed slots wait in a queue map, pool_slots, so nothing has to
// be updated under a bpf_spin_lock, where helpers cannot be called. A writer builds a new version on fresh blocks, swaps the
// pool_ref under the object's lock and frees the old blocks afterwards;
// readers copy a snapshot of the pool_ref and check each block's index
// header and trailer after copying it, so a read never mixes two versions.
// Only the last block of an object is partly empty, which Stats reports as
// MemoryEfficiency.
//
// # Using it from your own BPF program
//
// In C:
//
//	#define CISTERN_POOL_OBJECTS        // optional: generic u64-keyed objects
//	#include "cistern/pool.bpf.h"
//
//	// in any program that may take a bpf_spin_lock (not kprobe/tracepoint;
//	// tp_btf, raw_tp BTF, XDP, TC are fine):
//	pool_obj_write(id, buf, len);  // buf: a map value of >= pool_max_len() bytes
//	pool_obj_read(id, buf);        // returns the length or -errno
//
// A buffer map whose name starts with "pool_staging" is sized by Apply to
// hold the largest object, so it is the natural place for buf. Programs that
// need their own allocation map (Kerby-KV keys by memcached key) use
// pool_alloc, pool_block_get, pool_block_intact and pool_free directly.
//
// In Go, configure the collection spec before loading it:
//
//	spec, _ := loadMyProgram()                 // bpf2go's loader
//	cfg := pool.Config{BlockSize: 64, MaxBlocks: 8, CapacityBlocks: 1 << 16}
//	if err := cfg.Apply(spec); err != nil { … } // .rodata constants + map sizes
//	coll, _ := ebpf.NewCollection(spec)
//	st, _ := pool.CollectStats(pool.Maps{Index: …, Blocks: …, Stats: …}, refs)
//
// examples/execlog is a complete small user.
//
// # Objects from user space
//
// Open loads bpf/pool/pool.bpf.c, the generic objects driven through
// CISTERN_CALL programs (XDP run with BPF_PROG_TEST_RUN, see kernel.Call):
// Write, Read, Resize and Free run the very
// code a BPF user runs, from up to Slots goroutines at once. Pin and
// OpenPinned share one pool between processes.
package pool
